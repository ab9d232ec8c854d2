//! The control group: readable files compare with the right exit code — 0 when they agree,
//! 1 when they differ — so a refusal elsewhere is the input's fault, not the harness's.

use super::craft::good_torch;
use super::harness::{Expect, args, expect, fixture, s, write};

hostile!(torch_files_of_the_same_values_agree, |d| {
    let a = write(d, "a.pt", &good_torch(1));
    let a_again = write(d, "a_again.pt", &good_torch(1));
    expect(args(&["compare", &s(&a), &s(&a_again)]), Expect::Clean)
});

hostile!(torch_files_of_different_values_are_flagged, |d| {
    let a = write(d, "a.pt", &good_torch(1));
    let b = write(d, "b.pt", &good_torch(100));
    expect(args(&["compare", &s(&a), &s(&b)]), Expect::Flagged)
});

hostile!(a_perturbed_dump_is_flagged, |_d| {
    expect(
        args(&[
            "compare",
            &s(&fixture("dump_f32.safetensors")),
            &s(&fixture("dump_perturbed.safetensors")),
        ]),
        Expect::Flagged,
    )
});

hostile!(a_dump_against_itself_agrees, |_d| {
    expect(
        args(&[
            "compare",
            &s(&fixture("dump_f32.safetensors")),
            &s(&fixture("dump_f32.safetensors")),
        ]),
        Expect::Clean,
    )
});
