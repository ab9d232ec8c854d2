//! The tiny Qwen3.5 golden model (vision-language key layout, random weights that exercise
//! every path), compiled into the binary so the main command works with no download.

use std::path::Path;

use crate::error::Result;
use crate::model::{BUILTIN_TOKENIZER, Model, ModelSource, WeightCache, WeightSource};
use crate::util::input::Tokenizer;
use crate::weights::checkpoint::Checkpoint;
use crate::weights::config::ModelConfig;
use crate::weights::safetensors_file::SafetensorsFile;

const CONFIG: &[u8] = include_bytes!("../../golden/qwen3_5_tiny/config.json");
const WEIGHTS: &[u8] = include_bytes!("../../golden/qwen3_5_tiny/model.safetensors");

/// Stands in for a path in messages about the built-in files.
const NAME: &str = "<built-in qwen3_5_tiny>";

pub fn model() -> Result<Model> {
    let config = ModelConfig::from_bytes(CONFIG, &Path::new(NAME).join("config.json"))?;
    let file = SafetensorsFile::from_static(&format!("{NAME}/model.safetensors"), WEIGHTS)?;
    let checkpoint = Checkpoint::from_files(NAME.into(), vec![file])?;
    Ok(Model {
        config,
        weights: WeightSource::Checkpoint(checkpoint),
        source: ModelSource::Builtin,
        cache: WeightCache::default(),
    })
}

pub fn tokenizer() -> Result<Tokenizer> {
    Tokenizer::from_bytes(&Path::new(NAME).join("tokenizer.json"), BUILTIN_TOKENIZER)
}
