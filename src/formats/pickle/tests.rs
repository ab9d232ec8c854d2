use super::*;

fn small() -> Limits {
    Limits {
        pickle_depth: 16,
        pickle_objects: 10_000,
        ..Limits::default()
    }
}

#[test]
fn reads_a_dict_of_lists() {
    // {'a': [1, 2], 'b': (3.5,)} at protocol 2
    let p = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01K\x02eX\x01\x00\x00\x00bq\x03G@\x0c\x00\x00\x00\x00\x00\x00\x85q\x04u.";
    let v = parse_with(p, &small()).expect("parses");
    let Value::Dict(items) = v else {
        panic!("not a dict: {v:?}")
    };
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].0.value, Value::Str("a".into()));
    assert!(matches!(&items[0].1.value, Value::List(l) if l.len() == 2));
    assert!(matches!(&items[1].1.value, Value::Tuple(t) if t[0].value == Value::Float(3.5)));
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let mut p = vec![0x80, 2];
    p.extend(std::iter::repeat_n(b']', 1_000_000));
    p.extend(std::iter::repeat_n(b'a', 999_999));
    p.push(b'.');
    // Enough objects for the million lists: the depth cap must be what stops it.
    let limits = Limits {
        pickle_objects: 2_000_000,
        ..small()
    };
    let e = parse_with(&p, &limits).expect_err("too deep");
    assert!(e.contains("pickle-depth"), "{e}");
}

#[test]
fn memo_doubling_is_refused() {
    // l = [0]; then 60 times: l = [l, l] via BINGET copies.
    let mut p = vec![0x80, 2, b']', b'K', 0, b'a', b'q', 0];
    for _ in 0..60 {
        p.extend([b']', b'(', b'h', 0, b'h', 0, b'e', b'q', 0]);
    }
    p.push(b'.');
    let e = parse_with(&p, &small()).expect_err("doubling");
    assert!(
        e.contains("pickle-objects") || e.contains("pickle-depth"),
        "{e}"
    );
}

#[test]
fn truncation_and_junk_are_errors() {
    let p = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01K\x01u.";
    for n in 0..p.len() {
        assert!(
            parse_with(&p[..n], &small()).is_err(),
            "prefix of {n} bytes"
        );
    }
    assert!(parse_with(b"\x80\x02\xff.", &small()).is_err());
    assert!(parse_with(b"\x80\x02h\x07.", &small()).is_err());
    assert!(parse_with(b"\x80\x02u.", &small()).is_err());
}
