use std::path::PathBuf;

use super::*;
use crate::backends::BackendKind;
use crate::cli::values::DtypeArg;

fn args() -> CommonArgs {
    CommonArgs {
        backends: vec![BackendKind::Reference, BackendKind::Fused],
        dtypes: vec![DtypeArg(DType::F32), DtypeArg(DType::BF16)],
        repeats: None,
        warmup: 1,
        threads: Some(2),
        skip: vec!["fused@bf16".into()],
        torch: None,
        torch_script: Some(PathBuf::from("/nonexistent/bench_torch.py")),
        seed: 7,
        work_dir: None,
        keep: false,
        markdown: false,
        json: None,
    }
}

#[test]
fn plans_check_every_option_and_name_it() {
    let plan = checked_plan(&args(), 3).expect("valid");
    assert_eq!(plan.dtypes, vec![DType::F32, DType::BF16]);
    assert_eq!((plan.repeats, plan.threads), (3, 2));
    assert!(plan.skips.skips("fused", 64, DType::BF16));

    let bad = |edit: fn(&mut CommonArgs)| {
        let mut a = args();
        edit(&mut a);
        option_of(checked_plan(&a, 3).expect_err("refused"))
    };
    assert_eq!(
        bad(|a| a.dtypes.push(DtypeArg(crate::fp8::serving::SERVED))),
        "--dtypes"
    );
    assert_eq!(bad(|a| a.threads = Some(0)), "--threads");
    assert_eq!(bad(|a| a.repeats = Some(0)), "--repeats");
    assert_eq!(bad(|a| a.skip.push("fused@zz".into())), "--skip");

    let mut a = args();
    a.torch = Some(PathBuf::from("python3"));
    let e = checked_plan(&a, 3).expect_err("script missing");
    assert!(e.to_string().contains("--torch-script"), "{e}");
    // Without --torch-script the built-in copy runs: nothing to find on disk.
    a.torch_script = None;
    let plan = checked_plan(&a, 3).expect("the built-in script");
    assert!(plan.torch.expect("torch side").script.is_none());
}
