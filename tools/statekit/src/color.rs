//! Colour on a terminal only: `--color never|auto|always` (auto by default), and `NO_COLOR`
//! (<https://no-color.org>) turns `auto` off. Errors, `BROKEN` and problems are red,
//! warnings yellow, `diff`'s `+`/`-`/`~` lines green, red and yellow. Styles come from
//! `anstyle` (clap's own, so no new dependency tree).

use std::io::IsTerminal;
use std::sync::OnceLock;

/// When to colour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    #[default]
    Auto,
    /// Always (also into a pipe or file).
    Always,
    /// Never.
    Never,
}

static CHOICE: OnceLock<ColorChoice> = OnceLock::new();

/// Sets the choice for this process (the first call wins).
pub fn init(choice: ColorChoice) {
    let _ = CHOICE.set(choice);
}

/// Which stream a text goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Out,
    /// Standard error.
    Err,
}

/// Whether text for `stream` is coloured.
pub fn enabled(stream: Stream) -> bool {
    match CHOICE.get().copied().unwrap_or_default() {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
            let terminal = match stream {
                Stream::Out => std::io::stdout().is_terminal(),
                Stream::Err => std::io::stderr().is_terminal(),
            };
            terminal && !no_color
        }
    }
}

fn paint(text: &str, style: anstyle::Style, stream: Stream) -> String {
    if enabled(stream) {
        format!("{style}{text}{style:#}")
    } else {
        text.to_string()
    }
}

/// Red (errors, `BROKEN`, problems, removed lines).
pub fn red(text: &str, stream: Stream) -> String {
    paint(text, anstyle::AnsiColor::Red.on_default().bold(), stream)
}

/// Yellow (warnings, changed lines).
pub fn yellow(text: &str, stream: Stream) -> String {
    paint(text, anstyle::AnsiColor::Yellow.on_default(), stream)
}

/// Green (added lines, `ok`).
pub fn green(text: &str, stream: Stream) -> String {
    paint(text, anstyle::AnsiColor::Green.on_default(), stream)
}

/// A status word (`BROKEN` red, `ok` green, `INCOMPLETE` yellow, others plain).
pub fn status(word: &str, stream: Stream) -> String {
    match word {
        "BROKEN" => red(word, stream),
        "ok" | "OK" => green(word, stream),
        "INCOMPLETE" | "LEFTOVER" => yellow(word, stream),
        _ => word.to_string(),
    }
}
