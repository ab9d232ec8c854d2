//! Model folders whose config.json is absurd, inconsistent or not a file: every case is a
//! `dump` of that folder, refused naming config.json and the field.

use std::path::Path;

use serde_json::json;

use super::harness::{Case, dump_case, fifo, model_with};

/// An edit that sets `text_config.FIELD` to `v`.
fn text_config(field: &'static str, v: serde_json::Value) -> impl FnOnce(&mut serde_json::Value) {
    move |c: &mut serde_json::Value| {
        c["text_config"][field] = v;
    }
}

/// `dump` of the golden folder with `edit` made to its config.json (`tag` names the output),
/// refused naming config.json and `needles`.
fn bad_config(
    d: &Path,
    tag: &str,
    edit: impl FnOnce(&mut serde_json::Value),
    needles: &[&str],
) -> Case {
    let model = model_with(d, "cfg", edit);
    let mut n = vec!["config.json"];
    n.extend_from_slice(needles);
    dump_case(tag, d, &model, &[], &n)
}

hostile!(config_layers_u64_max, |d| {
    bad_config(
        d,
        "layers u64 max",
        text_config("num_hidden_layers", json!(u64::MAX)),
        &["num_hidden_layers", "--limit layers"],
    )
});

hostile!(config_layers_2_pow_20, |d| {
    bad_config(
        d,
        "layers 2^20",
        text_config("num_hidden_layers", json!(1 << 20)),
        &["num_hidden_layers"],
    )
});

hostile!(config_layers_0, |d| {
    bad_config(
        d,
        "layers 0",
        text_config("num_hidden_layers", json!(0)),
        &["num_hidden_layers"],
    )
});

hostile!(config_layers_negative, |d| {
    bad_config(
        d,
        "layers negative",
        text_config("num_hidden_layers", json!(-3)),
        &["num_hidden_layers"],
    )
});

hostile!(config_layers_string, |d| {
    bad_config(
        d,
        "layers string",
        text_config("num_hidden_layers", json!("8")),
        &["num_hidden_layers"],
    )
});

hostile!(config_head_dim_2_pow_40, |d| {
    bad_config(
        d,
        "head_dim 2^40",
        text_config("head_dim", json!(1u64 << 40)),
        &["head_dim", "--limit dim"],
    )
});

hostile!(config_head_dim_0, |d| {
    bad_config(
        d,
        "head_dim 0",
        text_config("head_dim", json!(0)),
        &["head_dim"],
    )
});

hostile!(config_hidden_2_pow_40, |d| {
    bad_config(
        d,
        "hidden 2^40",
        text_config("hidden_size", json!(1u64 << 40)),
        &["hidden_size"],
    )
});

hostile!(config_hidden_0, |d| {
    bad_config(
        d,
        "hidden 0",
        text_config("hidden_size", json!(0)),
        &["hidden_size"],
    )
});

hostile!(config_vocab_0, |d| {
    bad_config(
        d,
        "vocab 0",
        text_config("vocab_size", json!(0)),
        &["vocab_size"],
    )
});

hostile!(config_intermediate_0, |d| {
    bad_config(
        d,
        "intermediate 0",
        text_config("intermediate_size", json!(0)),
        &["intermediate_size"],
    )
});

hostile!(config_heads_0, |d| {
    bad_config(
        d,
        "heads 0",
        text_config("num_attention_heads", json!(0)),
        &["num_attention_heads"],
    )
});

hostile!(config_kv_heads_3, |d| {
    bad_config(
        d,
        "kv heads 3",
        text_config("num_key_value_heads", json!(3)),
        &["num_key_value_heads"],
    )
});

hostile!(config_kv_heads_0, |d| {
    bad_config(
        d,
        "kv heads 0",
        text_config("num_key_value_heads", json!(0)),
        &["num_key_value_heads"],
    )
});

hostile!(config_linear_key_heads_3, |d| {
    bad_config(
        d,
        "linear key heads 3",
        text_config("linear_num_key_heads", json!(3)),
        &["linear_num_key_heads"],
    )
});

hostile!(config_linear_key_heads_0, |d| {
    bad_config(
        d,
        "linear key heads 0",
        text_config("linear_num_key_heads", json!(0)),
        &["linear_num_key_heads"],
    )
});

hostile!(config_linear_key_dim_2_pow_40, |d| {
    bad_config(
        d,
        "linear key dim 2^40",
        text_config("linear_key_head_dim", json!(1u64 << 40)),
        &["linear_key_head_dim"],
    )
});

hostile!(config_conv_kernel_0, |d| {
    bad_config(
        d,
        "conv kernel 0",
        text_config("linear_conv_kernel_dim", json!(0)),
        &["linear_conv_kernel_dim"],
    )
});

hostile!(config_eps_negative, |d| {
    bad_config(
        d,
        "eps negative",
        text_config("rms_norm_eps", json!(-1e-6)),
        &["rms_norm_eps"],
    )
});

hostile!(config_eps_zero, |d| {
    bad_config(
        d,
        "eps zero",
        text_config("rms_norm_eps", json!(0.0)),
        &["rms_norm_eps"],
    )
});

hostile!(config_eps_5, |d| {
    bad_config(
        d,
        "eps 5",
        text_config("rms_norm_eps", json!(5.0)),
        &["rms_norm_eps"],
    )
});

hostile!(config_eps_string, |d| {
    bad_config(
        d,
        "eps string",
        text_config("rms_norm_eps", json!("1e-6")),
        &["rms_norm_eps"],
    )
});

hostile!(config_theta_0, |d| {
    bad_config(
        d,
        "theta 0",
        |c: &mut serde_json::Value| c["text_config"]["rope_parameters"]["rope_theta"] = json!(0.0),
        &["rope_theta"],
    )
});

hostile!(config_theta_negative, |d| {
    bad_config(
        d,
        "theta negative",
        |c: &mut serde_json::Value| {
            c["text_config"]["rope_parameters"]["rope_theta"] = json!(-10000.0)
        },
        &["rope_theta"],
    )
});

hostile!(config_rotary_factor_negative, |d| {
    bad_config(
        d,
        "rotary factor negative",
        |c: &mut serde_json::Value| {
            c["text_config"]["rope_parameters"]["partial_rotary_factor"] = json!(-0.5)
        },
        &["partial_rotary_factor"],
    )
});

hostile!(config_rotary_factor_2, |d| {
    bad_config(
        d,
        "rotary factor 2",
        |c: &mut serde_json::Value| {
            c["text_config"]["rope_parameters"]["partial_rotary_factor"] = json!(2.0)
        },
        &["partial_rotary_factor"],
    )
});

hostile!(config_rotary_factor_tiny, |d| {
    bad_config(
        d,
        "rotary factor tiny",
        |c: &mut serde_json::Value| {
            c["text_config"]["rope_parameters"]["partial_rotary_factor"] = json!(0.001)
        },
        &["rotary"],
    )
});

hostile!(config_rope_type_yarn, |d| {
    bad_config(
        d,
        "rope type yarn",
        |c: &mut serde_json::Value| {
            c["text_config"]["rope_parameters"]["rope_type"] = json!("yarn")
        },
        &["rope_type"],
    )
});

hostile!(config_layer_types_short, |d| {
    bad_config(
        d,
        "layer_types short",
        text_config("layer_types", json!(["linear_attention"])),
        &["layer_types"],
    )
});

hostile!(config_layer_types_unknown, |d| {
    bad_config(
        d,
        "layer_types unknown",
        text_config(
            "layer_types",
            json!([
                "linear_attention",
                "x",
                "linear_attention",
                "full_attention",
                "linear_attention",
                "linear_attention",
                "linear_attention",
                "full_attention"
            ]),
        ),
        &["layer_types"],
    )
});

hostile!(config_interval_0, |d| {
    bad_config(
        d,
        "interval 0",
        text_config("full_attention_interval", json!(0)),
        &["full_attention_interval"],
    )
});

hostile!(config_act_gelu, |d| {
    bad_config(
        d,
        "act gelu",
        text_config("hidden_act", json!("gelu")),
        &["hidden_act"],
    )
});

hostile!(config_model_type_unknown, |d| {
    bad_config(
        d,
        "model_type unknown",
        |c: &mut serde_json::Value| c["model_type"] = json!("llama"),
        &["model_type"],
    )
});

hostile!(config_text_config_missing, |d| {
    bad_config(
        d,
        "text_config missing",
        |c: &mut serde_json::Value| {
            c.as_object_mut().unwrap().remove("text_config");
        },
        &["text_config"],
    )
});

hostile!(config_text_config_a_list, |d| {
    bad_config(
        d,
        "text_config a list",
        |c: &mut serde_json::Value| c["text_config"] = json!([1]),
        &["text_config"],
    )
});

hostile!(config_hidden_size_missing, |d| {
    bad_config(
        d,
        "hidden_size missing",
        |c: &mut serde_json::Value| {
            c["text_config"]
                .as_object_mut()
                .unwrap()
                .remove("hidden_size");
        },
        &["hidden_size"],
    )
});

hostile!(config_top_level_array, |d| {
    bad_config(
        d,
        "top level array",
        |c: &mut serde_json::Value| *c = json!([1, 2]),
        &["JSON object"],
    )
});

hostile!(config_not_json, |d| {
    let not_json = model_with(d, "notjson", |_| {});
    std::fs::write(not_json.join("config.json"), b"{ not json").expect("write");
    dump_case(
        "config not json",
        d,
        &not_json,
        &[],
        &["config.json", "JSON"],
    )
});

hostile!(config_is_a_fifo, |d| {
    let fifo_cfg = model_with(d, "fifocfg", |_| {});
    std::fs::remove_file(fifo_cfg.join("config.json")).expect("rm");
    fifo(&fifo_cfg, "config.json");
    dump_case(
        "config is a FIFO",
        d,
        &fifo_cfg,
        &[],
        &["config.json", "FIFO"],
    )
});

hostile!(config_is_a_directory, |d| {
    let dir_cfg = model_with(d, "dircfg", |_| {});
    std::fs::remove_file(dir_cfg.join("config.json")).expect("rm");
    std::fs::create_dir(dir_cfg.join("config.json")).expect("mkdir");
    let needles = ["config.json", "directory"];
    dump_case("config is a directory", d, &dir_cfg, &[], &needles)
});
