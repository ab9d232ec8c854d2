//! FP8 as checkpoints store it and as serving engines compute with it: the two 8-bit formats
//! (`format`), what config.json's `quantization_config` says (`scheme`), block scales and exact
//! dequantisation (`blocks`), the checks that tie an FP8 checkpoint's tensors to its config
//! (`consistency`), and the W8A8 arithmetic of vLLM / SGLang that `--dtype fp8` runs (`w8a8`,
//! `serving`). Pure arithmetic on slices: the checkpoint and the model call it.

pub mod blocks;
pub mod consistency;
pub mod format;
pub mod scheme;
pub mod serving;
pub mod w8a8;

pub use blocks::BlockScales;
pub use format::Fp8Format;
pub use scheme::Fp8Scheme;
pub use serving::ActScale;
pub use w8a8::Fp8Weight;
