//! Shared output helpers: human tables and JSON.

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{Cell, CellAlignment, Table};
use serde::Serialize;

pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// A table with Cairn's style: a header row, numbers right-aligned.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY);
    table.set_header(header.iter().map(Cell::new));
    for row in rows {
        table.add_row(row.into_iter().enumerate().map(|(i, text)| {
            let cell = Cell::new(text);
            if i == 0 {
                cell
            } else {
                cell.set_alignment(CellAlignment::Right)
            }
        }));
    }
    table
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) -> CliResult {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// A float with `digits` decimals.
pub fn fixed(value: f64, digits: usize) -> String {
    format!("{value:.digits$}")
}

/// An integer with thousands separators.
pub fn grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
