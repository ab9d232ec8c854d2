use super::*;

fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).expect("lists").count()
}

#[test]
fn replaces_atomically_keeps_the_mode_and_cleans_up_on_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("report.txt");
    write_bytes(&target, b"first").expect("writes");
    assert_eq!(std::fs::read(&target).expect("reads"), b"first");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let failed = write_with(&target, |f| {
        f.write_all(b"half").expect("partial");
        Err(Error::output("/tmp/hsdiff-output-test", "disk full"))
    });
    assert!(failed.is_err());
    assert_eq!(std::fs::read(&target).expect("reads"), b"first");
    assert_eq!(entries(dir.path()), 1, "temp file left behind");
    write_bytes(&target, b"second").expect("writes");
    let mode = std::fs::metadata(&target)
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
    assert_eq!(std::fs::read(&target).expect("reads"), b"second");
}

#[test]
fn refuses_bad_targets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("a.pt");
    std::fs::write(&input, b"x").expect("writes");
    let inputs = Protected::of(&[&input]);
    assert!(inspect(&input, "--out", &inputs).is_err());
    assert!(inspect(dir.path(), "--out", &inputs).is_err());
    assert!(inspect(&dir.path().join("no/such/x"), "--out", &inputs).is_err());
    // Every file of an input folder, whatever its name, and model files not there yet.
    let model = dir.path().join("m");
    std::fs::create_dir(&model).expect("mkdir");
    std::fs::write(model.join("notes.txt"), b"{}").expect("writes");
    let folder = Protected::of(&[&model]);
    assert!(inspect(&model.join("notes.txt"), "--out", &folder).is_err());
    assert!(inspect(&model.join("config.json"), "--out", &folder).is_err());
    assert!(inspect(&model.join("report.txt"), "--out", &folder).is_ok());
    // A hard link is the same file.
    let link = dir.path().join("link.pt");
    std::fs::hard_link(&input, &link).expect("link");
    assert!(inspect(&link, "--out", &inputs).is_err());
    assert!(inspect(&dir.path().join("new.json"), "--out", &inputs).is_ok());
    // Devices and FIFOs are written in place.
    assert!(matches!(
        inspect(Path::new("/dev/null"), "--out", &inputs),
        Ok(Found::Stream(..))
    ));
}

#[test]
fn two_spellings_of_one_file_are_one_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("r.svg");
    let b = dir.path().join(".").join("r.svg");
    reserve(&a, "--out", &Protected::default()).expect("first");
    let err = reserve(&b, "--plot", &Protected::default()).expect_err("same file");
    assert!(err.to_string().contains("--plot and --out"), "{err}");
    write_bytes(&a, b"report").expect("writes the reserved one");
    assert_eq!(entries(dir.path()), 1, "temp file left behind");
}

#[test]
fn a_long_name_gets_a_shorter_temp_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = "r".repeat(name_max(dir.path()) - 4) + ".svg";
    let target = dir.path().join(name);
    write_bytes(&target, b"ok").expect("a legal name is written");
    assert_eq!(std::fs::read(&target).expect("reads"), b"ok");
    let too_long = dir.path().join("r".repeat(name_max(dir.path()) + 1));
    let err = inspect(&too_long, "--out", &Protected::default()).err();
    assert!(err.is_some_and(|e| e.to_string().contains("at most")));
}
