//! Figures for people: bytes in the binary unit that keeps three significant digits, integers
//! with thousands separators, and the verdict of a cell in words a user can repeat (DESIGN 9,
//! issue 36 item 5). Every format that shows people numbers (table, Markdown, HTML) uses these;
//! CSV and JSON keep exact bytes.

use crate::stats::Verdict;

/// The binary units a figure is shown in, with their divisors (bytes).
const UNITS: [(f64, &str); 4] = [
    (1.0, "B"),
    (1024.0, "KiB"),
    (1024.0 * 1024.0, "MiB"),
    (1024.0 * 1024.0 * 1024.0, "GiB"),
];

/// The unit for `values` (bytes): the largest of B, KiB, MiB, GiB in which the smallest non-zero
/// magnitude among them is still at least 100 (three significant digits before the point); B
/// when none is that large, or every value is zero. Returns the divisor and the unit's name.
///
/// `unit_for(&[258048.0, 245760.0, 1258496.0])` is `(1024.0, "KiB")`: 240 KiB is the smallest,
/// 0.234 MiB would lose the figure.
pub fn unit_for(values: &[f64]) -> (f64, &'static str) {
    let smallest = values
        .iter()
        .map(|v| v.abs())
        .filter(|a| a.is_finite() && *a > 0.0)
        .fold(f64::INFINITY, f64::min);
    if !smallest.is_finite() {
        return UNITS[0];
    }
    UNITS
        .iter()
        .rev()
        .find(|(div, _)| smallest / div >= 99.95)
        .copied()
        .unwrap_or(UNITS[0])
}

/// `x` with thousands separators and at least three significant digits: integers from 100 up
/// (`1,229`), below that up to three significant digits (`12.3`, `1.23`, `0.5`); signed with `+`
/// when `signed` and positive. Not finite: as Rust writes it.
pub fn figure(x: f64, signed: bool) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let sign = if x < 0.0 {
        "-"
    } else if signed && x > 0.0 {
        "+"
    } else {
        ""
    };
    let a = x.abs();
    if a == 0.0 {
        return "0".into();
    }
    if a.round() >= 100.0 {
        return format!("{sign}{}", thousands(a.round() as u128));
    }
    let magnitude = a.log10().floor() as i32;
    let decimals = (2 - magnitude).clamp(0, 12) as usize;
    let text = format!("{a:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{sign}{text}")
}

/// `n` with a comma every three digits: `1,258,496`.
pub fn thousands(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `v` bytes in the unit that keeps its three significant digits, signed: `+252 KiB`, `-512 B`,
/// `0 B`, `+1,229 KiB`.
pub fn bytes(v: f64) -> String {
    let (div, unit) = unit_for(&[v]);
    format!("{} {unit}", figure(v / div, true))
}

/// A shift and its interval (bytes) in one unit that keeps three significant digits of the
/// smallest non-zero of the three: `+252 [+240, +1,229] KiB`.
pub fn bytes_interval(shift: f64, low: f64, high: f64) -> String {
    let (div, unit) = unit_for(&[shift, low, high]);
    format!(
        "{} [{}, {}] {unit}",
        figure(shift / div, true),
        figure(low / div, true),
        figure(high / div, true)
    )
}

/// A loop's iteration count as people say it, always exact: `1M` for 1,000,000, `10k` for
/// 10,000 (round thousands from 10,000 up), else with separators: `2,000`, `12,345`.
pub fn iterations(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", thousands(u128::from(n / 1_000_000)))
    } else if n >= 10_000 && n.is_multiple_of(1000) {
        format!("{}k", thousands(u128::from(n / 1000)))
    } else {
        thousands(u128::from(n))
    }
}

/// What a verdict sentence says: the verdict word and the interval of the figure that gave it.
#[derive(Debug, Clone, Copy)]
pub struct Said<'a> {
    /// The cell's verdict.
    pub verdict: Verdict,
    /// The control as people name it: its value of the key that differs (`reuse`).
    pub control: &'a str,
    /// The interval's bounds (bytes, or bytes per 1000 iterations when `rate`), `None` without one.
    pub interval: Option<(f64, f64)>,
    /// The interval's confidence (0.95 when `None`).
    pub confidence: Option<f64>,
    /// Whether the figure is a rate (bytes per 1000 iterations).
    pub rate: bool,
    /// Loop iterations of the cell's runs, when they all ran the same number (for growth).
    pub iterations: Option<u64>,
    /// The repetitions per cell a `too few runs` verdict needs, when known.
    pub needed: Option<usize>,
}

/// The verdict of a cell in words a user can repeat:
/// `retains 240-1,229 KiB more than reuse per 10k iterations, 95%`,
/// `no detectable difference from reuse: between -3 and +5 KiB per 10k iterations, 95%`,
/// `too few runs to tell: need 4 per cell`. The bounds share the unit that keeps three
/// significant digits of the smaller non-zero one.
pub fn sentence(said: Said<'_>) -> String {
    let conf = format!("{}%", figure(said.confidence.unwrap_or(0.95) * 100.0, false));
    let Some((low, high)) = said.interval else {
        return match said.needed {
            Some(n) => format!("too few runs to tell: need {n} per cell"),
            None => format!("{}: no interval", said.verdict.as_str()),
        };
    };
    let (div, unit) = unit_for(&[low, high]);
    let (lo, hi) = (low / div, high / div);
    let per = match (said.rate, said.iterations) {
        (true, _) => " per 1k iterations".to_string(),
        (false, Some(n)) => format!(" per {} iterations", iterations(n)),
        (false, None) => " over the loop".to_string(),
    };
    let control = said.control;
    let plain = |x: f64| figure(x, false);
    let signed = |x: f64| figure(x, true);
    match said.verdict {
        Verdict::AboveControl => format!(
            "retains {}-{} {unit} more than {control}{per}, {conf}",
            plain(lo),
            plain(hi)
        ),
        Verdict::BelowControl => format!(
            "retains {}-{} {unit} less than {control}{per}, {conf}",
            plain(-hi),
            plain(-lo)
        ),
        Verdict::Equivalent => format!(
            "equivalent to {control} within the margin: between {} and {} {unit}{per}, {conf}",
            signed(lo),
            signed(hi)
        ),
        Verdict::NoDetectableDifference => format!(
            "no detectable difference from {control}: between {} and {} {unit}{per}, {conf}",
            signed(lo),
            signed(hi)
        ),
        Verdict::TooFewRuns => match said.needed {
            Some(n) => format!(
                "too few runs to tell: between {} and {} {unit}{per} at {conf}; need {n} per cell",
                signed(lo),
                signed(hi)
            ),
            None => format!(
                "too few runs to tell: between {} and {} {unit}{per} at {conf}",
                signed(lo),
                signed(hi)
            ),
        },
    }
}

/// What was measured, from manifest text: `the built-in Rust port (hwr-exp probe
/// safetensors-retention)` when `[command] argv` runs it, else `argv: ...` or `shell: ...` as the
/// manifest gives them (matrix placeholders kept); `None` when the text names no command.
pub fn measured(manifest_text: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(manifest_text).ok()?;
    let command = table.get("command")?.as_table()?;
    if let Some(argv) = command.get("argv").and_then(toml::Value::as_array) {
        let words: Vec<&str> = argv.iter().filter_map(toml::Value::as_str).collect();
        let probe = words.windows(2).any(|w| w == ["probe", "safetensors-retention"]);
        if probe
            && words
                .first()
                .is_some_and(|w| *w == "{hwr-exp}" || w.ends_with("hwr-exp"))
        {
            return Some("the built-in Rust port (hwr-exp probe safetensors-retention)".into());
        }
        return Some(format!("argv: {}", words.join(" ")));
    }
    let shell = command.get("shell").and_then(toml::Value::as_str)?;
    Some(format!("shell: {shell}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: f64 = 1024.0;
    const MIB: f64 = 1024.0 * 1024.0;
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

    /// The issue's example: a 252 KiB shift whose interval is 240 KiB to 1,229 KiB was shown
    /// `+0.2 [+0.2, +1.2] MiB`.
    #[test]
    fn the_issues_shift_keeps_its_figure() {
        assert_eq!(
            bytes_interval(252.0 * KIB, 240.0 * KIB, 1229.0 * KIB),
            "+252 [+240, +1,229] KiB"
        );
    }

    #[test]
    fn boundaries() {
        // Negative, zero and mixed signs.
        assert_eq!(
            bytes_interval(-252.0 * KIB, -1229.0 * KIB, -240.0 * KIB),
            "-252 [-1,229, -240] KiB"
        );
        assert_eq!(bytes_interval(0.0, 0.0, 0.0), "0 [0, 0] B");
        assert_eq!(bytes_interval(0.0, -3.0 * KIB, 5.0 * KIB), "0 [-3,072, +5,120] B");
        // Bytes: nothing reaches 100 KiB.
        assert_eq!(bytes(512.0), "+512 B");
        assert_eq!(bytes(-4096.0), "-4,096 B");
        assert_eq!(bytes(99.0 * KIB), "+101,376 B");
        assert_eq!(bytes(100.0 * KIB), "+100 KiB");
        // Small rates in bytes keep three significant digits.
        assert_eq!(bytes(12.34), "+12.3 B");
        assert_eq!(bytes(0.5), "+0.5 B");
        // MiB and GiB.
        assert_eq!(bytes(177.0 * MIB), "+177 MiB");
        assert_eq!(bytes(-177.0 * MIB), "-177 MiB");
        assert_eq!(
            bytes_interval(5.0 * GIB, 4.5 * GIB, 6.0 * GIB),
            "+5,120 [+4,608, +6,144] MiB"
        );
        assert_eq!(bytes(150.0 * GIB), "+150 GiB");
        assert_eq!(bytes(2048.0 * GIB), "+2,048 GiB");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_258_496), "1,258,496");
        assert_eq!(iterations(10_000), "10k");
        assert_eq!(iterations(2000), "2,000");
        assert_eq!(iterations(1_000_000), "1M");
        assert_eq!(iterations(12_345), "12,345");
    }

    fn said(
        verdict: Verdict,
        interval: Option<(f64, f64)>,
        rate: bool,
        iterations: Option<u64>,
    ) -> Said<'static> {
        Said {
            verdict,
            control: "reuse",
            interval,
            confidence: Some(0.95),
            rate,
            iterations,
            needed: None,
        }
    }

    /// The issue's sentence, and one per verdict word.
    #[test]
    fn verdicts_in_words() {
        assert_eq!(
            sentence(said(
                Verdict::AboveControl,
                Some((240.0 * KIB, 1229.0 * KIB)),
                false,
                Some(10_000)
            )),
            "retains 240-1,229 KiB more than reuse per 10k iterations, 95%"
        );
        assert_eq!(
            sentence(said(
                Verdict::BelowControl,
                Some((-1229.0 * KIB, -240.0 * KIB)),
                false,
                Some(10_000)
            )),
            "retains 240-1,229 KiB less than reuse per 10k iterations, 95%"
        );
        assert_eq!(
            sentence(said(
                Verdict::NoDetectableDifference,
                Some((-300.0 * KIB, 500.0 * KIB)),
                false,
                Some(2000)
            )),
            "no detectable difference from reuse: between -300 and +500 KiB per 2,000 iterations, 95%"
        );
        assert_eq!(
            sentence(said(
                Verdict::AboveControl,
                Some((24.0 * KIB, 26.0 * KIB)),
                true,
                None
            )),
            "retains 24,576-26,624 B more than reuse per 1k iterations, 95%"
        );
        let mut few = said(Verdict::TooFewRuns, None, false, None);
        few.needed = Some(4);
        assert_eq!(sentence(few), "too few runs to tell: need 4 per cell");
    }

    #[test]
    fn what_was_measured() {
        let probe = "[command]\nargv = [\"{hwr-exp}\", \"probe\", \"safetensors-retention\", \"--mode\", \"{mode}\"]\n";
        assert_eq!(
            measured(probe).as_deref(),
            Some("the built-in Rust port (hwr-exp probe safetensors-retention)")
        );
        let argv = "[command]\nargv = [\"python3\", \"diag.py\", \"--mode\", \"{mode}\"]\n";
        assert_eq!(
            measured(argv).as_deref(),
            Some("argv: python3 diag.py --mode {mode}")
        );
        let shell = "[command]\nshell = \"python bench.py --mode {mode}\"\n";
        assert_eq!(
            measured(shell).as_deref(),
            Some("shell: python bench.py --mode {mode}")
        );
        assert_eq!(measured("format = 1\n"), None);
    }
}
