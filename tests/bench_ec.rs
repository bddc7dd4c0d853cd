//! `cairn bench ec`: the erasure code measured on one core, and its bad
//! input refused with a clear message.

use std::process::Command;

fn cairn(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("cairn runs")
}

#[test]
fn bench_ec_measures_each_shape_and_refuses_bad_ones() {
    let out = cairn(&[
        "bench",
        "ec",
        "--shapes",
        "2+1,4+2",
        "--stripe",
        "64K",
        "--duration",
        "50ms",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let results = results.as_array().expect("a list");
    assert_eq!(results.len(), 2);
    for r in results {
        for field in [
            "encode_gb_per_sec",
            "rebuild_gb_per_sec",
            "parity_delta_gb_per_sec",
        ] {
            assert!(r[field].as_f64().is_some_and(|v| v > 0.0), "{field}: {r}");
        }
    }
    assert_eq!(results[1]["chunk_bytes"], 16384);
    for (shape, says) in [
        ("0+1", "not supported"),
        ("4-2", "is not K+M"),
        ("200+100", "not supported"),
    ] {
        let out = cairn(&["bench", "ec", "--shapes", shape, "--duration", "10ms"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{shape}: {err}"
        );
    }
}
