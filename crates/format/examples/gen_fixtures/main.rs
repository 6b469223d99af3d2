//! Writes the golden fixtures of the canonical format:
//!
//! ```text
//! cargo run -p statekit-format --example gen_fixtures -- fixtures/v1
//! ```
//!
//! Output is deterministic; `tests/golden.rs` fails when the checked-in files differ from
//! what the current code writes.

mod generator;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::env::args().nth(1).unwrap_or_else(|| "fixtures/v1".to_string());
    let root = std::path::Path::new(&root);
    generator::write_all(root)?;
    println!("wrote {}/{{{}}}", root.display(), {
        let mut names = vec![generator::BASIC];
        names.extend(generator::CORRUPT.iter().map(|c| c.0));
        names.join(",")
    });
    Ok(())
}
