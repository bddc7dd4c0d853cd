//! `cairn bench ec`: the erasure code's throughput on one core, without
//! I/O, for each code shape asked: encoding a stripe's parity, rebuilding
//! a stripe with `m` data shards lost, and a parity-delta update of one
//! data chunk. Figures are GB/s (10^9 bytes) of data: the stripe's `k`
//! chunks for encode and rebuild, the changed chunk for a delta.

use crate::output::{CliResult, fixed, print_json, table};
use crate::units::{parse_duration, parse_size};
use cairn_ec::{Codec, ReedSolomon};
use clap::Args;
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct EcArgs {
    /// Code shapes, `K+M`, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "2+1,4+2,8+3")]
    shapes: Vec<String>,
    /// Bytes of data per stripe (split into `k` chunks), e.g. 1M, 64K.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    stripe: u64,
    /// How long each phase of each shape runs (e.g. 2s).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    duration: Duration,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, serde::Serialize)]
struct ShapeResult {
    k: usize,
    m: usize,
    chunk_bytes: usize,
    encode_gb_per_sec: f64,
    rebuild_gb_per_sec: f64,
    parity_delta_gb_per_sec: f64,
}

/// `K+M` as two numbers.
fn parse_shape(text: &str) -> CliResult<(usize, usize)> {
    let bad = || format!("code shape {text:?} is not K+M (for example 4+2)");
    let (k, m) = text.trim().split_once('+').ok_or_else(bad)?;
    Ok((
        k.trim().parse().map_err(|_| bad())?,
        m.trim().parse().map_err(|_| bad())?,
    ))
}

/// Runs `op` until `duration` has passed; returns calls per second.
fn rate(duration: Duration, mut op: impl FnMut() -> CliResult) -> CliResult<f64> {
    // One call untimed: working space allocated, pages touched.
    op()?;
    let started = Instant::now();
    let mut calls = 0u64;
    while started.elapsed() < duration {
        op()?;
        calls += 1;
    }
    Ok(calls as f64 / started.elapsed().as_secs_f64())
}

fn measure(k: usize, m: usize, stripe: u64, duration: Duration) -> CliResult<ShapeResult> {
    let code = ReedSolomon::new(k, m)?;
    let chunk = usize::try_from(stripe.div_ceil(k as u64))?.max(2);
    let data: Vec<Vec<u8>> = (0..k)
        .map(|i| {
            (0..chunk)
                .map(|b| (b as u8).wrapping_mul(29) ^ (i as u8))
                .collect()
        })
        .collect();
    let mut parity = vec![vec![0u8; chunk]; m];
    let data_bytes = (k * chunk) as f64;
    let encode = rate(duration, || {
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.encode(&refs, &mut outs)?;
        Ok(())
    })?;
    // The first m data chunks lost (all of them when m >= k), rebuilt
    // from the rest each time.
    let lost = m.min(k);
    let mut shards: Vec<Option<Vec<u8>>> = data.iter().chain(&parity).cloned().map(Some).collect();
    let rebuild = rate(duration, || {
        for s in &mut shards[..lost] {
            *s = None;
        }
        code.reconstruct(&mut shards)?;
        Ok(())
    })?;
    let delta = vec![0x5au8; chunk];
    let parity_delta = rate(duration, || {
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.parity_delta(0, &delta, &mut outs)?;
        Ok(())
    })?;
    Ok(ShapeResult {
        k,
        m,
        chunk_bytes: chunk,
        encode_gb_per_sec: encode * data_bytes / 1e9,
        rebuild_gb_per_sec: rebuild * data_bytes / 1e9,
        parity_delta_gb_per_sec: parity_delta * chunk as f64 / 1e9,
    })
}

pub fn run(args: &EcArgs) -> CliResult {
    if args.stripe == 0 || args.stripe > 1 << 30 {
        return Err("--stripe must be from 1 byte to 1G".into());
    }
    let shapes = args
        .shapes
        .iter()
        .map(|s| parse_shape(s))
        .collect::<CliResult<Vec<_>>>()?;
    let mut results = Vec::new();
    for (k, m) in shapes {
        results.push(measure(k, m, args.stripe, args.duration)?);
    }
    if args.json {
        return print_json(&results);
    }
    let rows = results
        .iter()
        .map(|r| {
            vec![
                format!("{}+{}", r.k, r.m),
                r.chunk_bytes.to_string(),
                fixed(r.encode_gb_per_sec, 2),
                fixed(r.rebuild_gb_per_sec, 2),
                fixed(r.parity_delta_gb_per_sec, 2),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "code",
                "chunk bytes",
                "encode GB/s",
                "rebuild (m lost) GB/s",
                "parity delta GB/s",
            ],
            rows,
        )
    );
    println!("one core, no I/O; GB/s of data (10^9 bytes)");
    Ok(())
}
