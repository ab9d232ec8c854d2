use super::*;

fn with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

fn index(count: usize, vars: &[(&str, &str)]) -> Option<u64> {
    shard_index(count, &with(vars)).ok().map(|(i, _)| i)
}

fn error(count: usize, vars: &[(&str, &str)]) -> String {
    match shard_index(count, &with(vars)) {
        Ok(i) => panic!("{vars:?} accepted: {i:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn each_scheduler_gives_the_index() {
    let slurm = [("SLURM_ARRAY_TASK_ID", "5"), ("SLURM_ARRAY_TASK_MIN", "1")];
    assert_eq!(index(8, &slurm), Some(4));
    let stepped = [
        ("SLURM_ARRAY_TASK_ID", "6"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_STEP", "2"),
        ("SLURM_ARRAY_TASK_COUNT", "4"),
    ];
    assert_eq!(index(4, &stepped), Some(3));
    let step_one = [
        ("SLURM_ARRAY_TASK_ID", "3"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_STEP", "1"),
    ];
    assert_eq!(index(4, &step_one), Some(3));
    assert_eq!(index(3, &[("JOB_COMPLETION_INDEX", "0")]), Some(0));
    assert_eq!(index(3, &[("HSDIFF_SHARD_INDEX", "2")]), Some(2));
    let (_, said) = shard_index(8, &with(&slurm)).expect("slurm");
    assert_eq!(said, "SLURM_ARRAY_TASK_ID=5 − SLURM_ARRAY_TASK_MIN=1");
    let agree = [("JOB_COMPLETION_INDEX", "1"), ("HSDIFF_SHARD_INDEX", "1")];
    let (_, said) = shard_index(2, &with(&agree)).expect("agree");
    assert!(said.ends_with("(agrees: HSDIFF_SHARD_INDEX=1)"), "{said}");
}

#[test]
fn refusals() {
    assert!(error(4, &[]).contains("no shard index in the environment"));
    let two = [("JOB_COMPLETION_INDEX", "1"), ("HSDIFF_SHARD_INDEX", "2")];
    assert!(error(4, &two).contains("two shard indices"));
    assert!(error(4, &[("HSDIFF_SHARD_INDEX", "x")]).contains("not a whole number"));
    assert!(error(4, &[("HSDIFF_SHARD_INDEX", "")]).contains("not a whole number"));
    let count = [
        ("SLURM_ARRAY_TASK_ID", "1"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_COUNT", "8"),
    ];
    assert!(error(4, &count).contains("SLURM_ARRAY_TASK_COUNT=8"));
    let below = [("SLURM_ARRAY_TASK_ID", "0"), ("SLURM_ARRAY_TASK_MIN", "1")];
    assert!(error(4, &below).contains("below SLURM_ARRAY_TASK_MIN"));
    let off_step = [
        ("SLURM_ARRAY_TASK_ID", "3"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_STEP", "2"),
    ];
    assert!(error(4, &off_step).contains("not on the array's steps"));
    assert!(error(4, &[("SLURM_ARRAY_TASK_ID", "1")]).contains("SLURM_ARRAY_TASK_MIN"));
    let bad_slurm = [("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_MIN", "z")];
    assert!(error(4, &bad_slurm).contains("SLURM_ARRAY_TASK_MIN"));
}
