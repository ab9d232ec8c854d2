//! Hand-written fused CPU kernels for the Gated DeltaNet (GDN) layer of Qwen3.5 / Qwen3-Next.
//!
//! The module tree is self-contained (only `rayon` and `half`), so it can be dropped into a
//! larger crate. Every public kernel validates its shapes up front and
//! returns [`KernelError`] instead of panicking on bad input.
//!
//! Precision policy (mirrors the production fused GPU kernels, gdn-spec §6.2):
//! - `f64` / `f32` storage: that dtype throughout.
//! - `bf16` / `f16` storage: inputs read in that dtype, `f32` accumulation and `f32` state,
//!   one rounding per fused step (conv + SiLU rounded once to the storage type, core output
//!   rounded once).
//!
//! The [`truth`] module is a deliberately naive `f64` implementation used by the tests.

mod conv;
mod delta;
mod dims;
mod dispatch;
mod element;
mod error;
mod fused;
mod norm;
mod par;
pub mod truth;

pub use conv::causal_conv1d_silu;
pub use dims::{ConvDims, GdnDims, NormDims};
pub use dispatch::{isa_name, isa_override_error};
pub use element::{Accum, Element};
pub use error::KernelError;
pub use fused::{fused_gdn, gated_delta_rule};
pub use norm::gated_rms_norm;

/// Constant added to Σx² before the inverse square root in the q/k L2 norm (HF `l2norm`,
/// fla `l2norm_fwd`): a fixed constant, not the model's `rms_norm_eps`.
pub const L2NORM_EPS: f64 = 1e-6;
