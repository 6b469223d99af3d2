//! Recomputes every CRC of a file in place, as the file targets do before their second
//! run: `fixcrc <keyed|operator|metadata|changelog> <file>...`. Turns an artifact that only
//! fails behind repaired checksums into a file that fails as is (for the CLI or a test).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((kind, files)) = args.split_first() else {
        eprintln!("usage: fixcrc <keyed|operator|metadata|changelog> <file>...");
        std::process::exit(2);
    };
    let repair: fn(&mut [u8]) = match kind.as_str() {
        "keyed" | "operator" | "container" => statekit_fuzz::fixup::container,
        "metadata" => statekit_fuzz::fixup::metadata,
        "changelog" => statekit_fuzz::fixup::changelog,
        other => {
            eprintln!("fixcrc: unknown kind {other:?}");
            std::process::exit(2);
        }
    };
    for f in files {
        let mut b = std::fs::read(f).unwrap_or_else(|e| panic!("{f}: {e}"));
        repair(&mut b);
        std::fs::write(f, &b).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
}
