//! A report's records: one CSV row per run ([`write_csv`]) and the JSON document
//! ([`write_json`]), and each run's record as a large report spills it while the runs are read
//! ([`csv_spill_record`], [`json_spill_record`]). Below the reading (`collection` spills with
//! them) and the text renderers (`render` writes CSV and JSON with them).

use super::metrics::Metric;
use super::model::{Report, RunSummary, Spill};

/// One CSV row per run: identity, matrix values (one column per key), run facts, retention numbers,
/// the aggregation flag and metric values. Missing values are empty fields.
///
/// # Errors
/// Only from the CSV writer.
pub fn report_csv(r: &Report) -> anyhow::Result<String> {
    let mut out = Vec::new();
    write_csv(r, &mut out)?;
    Ok(String::from_utf8(out)?)
}

/// [`report_csv`] written to `out` row by row (every run of a large bundle is read again, one at a
/// time: see [`super::model::Runs`]).
///
/// # Errors
/// From the CSV writer, `out`, or the bundle when a run can no longer be read.
pub fn write_csv(r: &Report, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_writer(&mut *out);
    let layout = CsvLayout {
        keys: &r.matrix_keys,
        node: r.multi_node(),
        retention: r.has_retention,
        pointers: &r.metric_pointers,
    };
    w.write_record(layout.header())?;
    match r.runs.spilled(Spill::Csv) {
        // Rows of every column were spilled as the runs were read, cut by column group: the
        // report's groups are written ([`csv_spill_record`]).
        Some(file) => {
            use std::io::{Read, Write};
            w.flush()?;
            drop(w);
            let keep = layout.groups().map(|n| n > 0);
            let mut spilled = std::io::BufReader::with_capacity(1 << 16, file?);
            let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
            let mut header = [0u8; CSV_SPILL_HEADER];
            let mut row = Vec::new();
            loop {
                match spilled.read_exact(&mut header) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e.into()),
                }
                row.resize(CSV_SPILL_HEADER, 0);
                row.copy_from_slice(&header);
                row.resize(CSV_SPILL_HEADER + spilled_row_len(&header), 0);
                spilled.read_exact(&mut row[CSV_SPILL_HEADER..])?;
                write_spilled_row(&row, keep, &mut out)?;
            }
            out.flush()?;
        }
        None => {
            r.runs.try_for_each(|run| {
                layout.write_fields(run, |field| w.write_field(field))?;
                Ok(w.write_record(None::<&[u8]>)?)
            })?;
            w.flush()?;
        }
    }
    Ok(())
}

/// The columns of a CSV report: `run_id`, `index`, the matrix keys, `node` (when runs ran on
/// several nodes), the run's ending and check, the retention columns (when any output has the
/// retention schema), the `[report]` metrics, `unusable_values`.
#[derive(Debug, Clone, Copy)]
pub struct CsvLayout<'a> {
    /// Matrix keys, in plan order.
    pub keys: &'a [String],
    /// With the `node` column.
    pub node: bool,
    /// With the retention columns.
    pub retention: bool,
    /// `[report] metrics` (name, pointer).
    pub pointers: &'a [(String, String)],
}

impl<'a> CsvLayout<'a> {
    /// Every column (`node` and the retention ones included): what a large report spills while
    /// it reads the runs, before it knows which of them its CSV has.
    pub fn full(keys: &'a [String], pointers: &'a [(String, String)]) -> CsvLayout<'a> {
        CsvLayout {
            keys,
            node: true,
            retention: true,
            pointers,
        }
    }

    /// The header row.
    pub fn header(&self) -> Vec<String> {
        let mut header: Vec<String> = ["run_id", "index"].map(String::from).to_vec();
        header.extend(self.keys.iter().cloned());
        if self.node {
            header.push("node".into());
        }
        header.extend(
            [
                "repetition",
                "termination",
                "exit_code",
                "signal",
                "wall_seconds",
                "peak_rss_bytes",
                "output_check",
                "outcome",
                "aggregated",
                "excluded_reason",
                "reason",
            ]
            .map(String::from),
        );
        if self.retention {
            header.extend(["output_mode", "output_tensor_elements", "loop_iterations"].map(String::from));
            header.extend(Metric::ALL.iter().map(|m| m.csv_name()));
            header.extend(["last_tensor_alive", "output_completed"].map(String::from));
        }
        header.extend(self.pointers.iter().map(|(n, _)| format!("metric_{n}")));
        header.push("unusable_values".into());
        header
    }

    /// Hands one run's row to `field`, a field at a time in column order, each as its text
    /// (numbers written into one buffer lent to all of them, not a `String` a field).
    ///
    /// # Errors
    /// The first error of `field`.
    pub fn write_fields<E>(
        &self,
        run: &RunSummary,
        mut field: impl FnMut(&str) -> Result<(), E>,
    ) -> Result<(), E> {
        use std::fmt::Write as _;
        let mut buf = String::new();
        // The text of `v` (empty for `None`), written into `buf` and handed to `field`.
        let mut shown = |v: Option<&dyn std::fmt::Display>, field: &mut dyn FnMut(&str) -> Result<(), E>| {
            buf.clear();
            if let Some(v) = v {
                write!(buf, "{v}").expect("a String takes any text");
            }
            field(&buf)
        };
        field(&run.run_id)?;
        shown(Some(&run.index), &mut field)?;
        for k in self.keys {
            shown(run.cell.get(k).map(|v| v as _), &mut field)?;
        }
        if self.node {
            field(run.node.as_deref().unwrap_or_default())?;
        }
        shown(Some(&run.repetition), &mut field)?;
        if run.finished {
            let termination = run.termination_text();
            field(termination.split(' ').next().unwrap_or(""))?;
        } else {
            field("not-run")?;
        }
        shown(run.exit_code.as_ref().map(|v| v as _), &mut field)?;
        shown(run.signal.as_ref().map(|v| v as _), &mut field)?;
        shown(run.wall_seconds.as_ref().map(|v| v as _), &mut field)?;
        shown(run.peak_rss_bytes.as_ref().map(|v| v as _), &mut field)?;
        match run.output_check {
            Some(_) => field(&run.output_text())?,
            None => field("")?,
        }
        field(run.outcome.map(|v| v.as_str()).unwrap_or_default())?;
        field(if run.excluded.is_none() { "true" } else { "false" })?;
        field(run.excluded.as_deref().unwrap_or_default())?;
        field(run.reason.as_deref().unwrap_or_default())?;
        if self.retention {
            match &run.retention {
                Some(ret) => {
                    field(ret.mode.as_deref().unwrap_or_default())?;
                    shown(ret.tensor_elements.as_ref().map(|v| v as _), &mut field)?;
                    shown(Some(&ret.loop_iterations), &mut field)?;
                    for m in Metric::ALL {
                        shown(m.exact_value(ret).as_ref().map(|v| v as _), &mut field)?;
                    }
                    shown(ret.last_tensor_alive.as_ref().map(|v| v as _), &mut field)?;
                    shown(ret.completed.as_ref().map(|v| v as _), &mut field)?;
                }
                None => {
                    for _ in 0..Metric::ALL.len() + 5 {
                        field("")?;
                    }
                }
            }
        }
        for (name, _) in self.pointers {
            // Full precision in CSV: it is read by programs, not people.
            match run.metrics.get(name).and_then(|v| v.as_ref()) {
                Some(super::model::MetricValue::Number(x)) => shown(Some(x), &mut field)?,
                Some(other) => shown(Some(other), &mut field)?,
                None => field("")?,
            }
        }
        field(&run_unusable_text(run))
    }

    /// How many columns each group has, in order: run-id, index and the matrix keys; `node`;
    /// the run's ending and check (11); the retention columns; the `[report]` metrics and
    /// `unusable_values`. The second and fourth are the optional ones (0 when left out).
    fn groups(&self) -> [usize; 5] {
        [
            2 + self.keys.len(),
            usize::from(self.node),
            11,
            if self.retention {
                3 + Metric::ALL.len() + 2
            } else {
                0
            },
            self.pointers.len() + 1,
        ]
    }
}

/// One run's CSV row with every column ([`CsvLayout::full`]), encoded as CSV and cut where each
/// column group ends (run-id to keys, `node`, the ending, retention, metrics): what a large
/// report spills for each run while it reads them, on the reading threads
/// ([`Spill::Csv`]). The record is the row's length and the four cuts (each a
/// little-endian `u32`), then the row without its newline; every group after the first starts
/// with its comma, so [`write_csv`] writes a layout's row by leaving out the groups it has not,
/// without reading the fields again. (A field is quoted for what it holds alone, so the row cut
/// and joined is the row the layout would write.)
///
/// # Errors
/// Only from the CSV writer.
pub fn csv_spill_record(
    run: &RunSummary,
    keys: &[String],
    pointers: &[(String, String)],
) -> anyhow::Result<Vec<u8>> {
    let layout = CsvLayout::full(keys, pointers);
    let mut w = csv::WriterBuilder::new()
        // The default 8 KiB, zeroed for each run, cost more than the row.
        .buffer_capacity(512)
        .from_writer(vec![0; CSV_SPILL_HEADER]);
    let mut cuts = [0u32; 4];
    // Where each group ends, as a count of fields. A group's cut is the comma that starts the
    // next group: the writer puts a quoted field's closing quote out only with what follows it
    // (the comma), so after a group's last field the row so far may lack that quote. The length
    // then is kept (`open`), and once the next field is written the comma is found there: at
    // that length, or one byte on past the closing quote.
    let mut ends = layout.groups();
    for at in 1..ends.len() {
        ends[at] += ends[at - 1];
    }
    let mut written = 0;
    // (group, length): on the stack, as this runs for every run a large report reads.
    let mut open = smallvec::SmallVec::<[(usize, usize); 4]>::new();
    layout.write_fields(run, |field| -> anyhow::Result<()> {
        w.write_field(field)?;
        written += 1;
        if !open.is_empty() {
            w.flush()?;
            let row = &w.get_ref()[CSV_SPILL_HEADER..];
            for (group, at) in open.drain(..) {
                let comma = at + usize::from(row.get(at) == Some(&b'"'));
                anyhow::ensure!(
                    row.get(comma) == Some(&b','),
                    "a spilled CSV row without its comma"
                );
                cuts[group] = u32::try_from(comma)?;
            }
        }
        for (group, _) in ends.iter().enumerate().filter(|&(_, &end)| end == written) {
            if group < cuts.len() {
                w.flush()?;
                open.push((group, w.get_ref().len() - CSV_SPILL_HEADER));
            }
        }
        Ok(())
    })?;
    anyhow::ensure!(open.is_empty(), "a spilled CSV row ends with a group cut open");
    w.write_record(None::<&[u8]>)?;
    let mut bytes = w.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))?;
    bytes.pop(); // The record's newline.
    let len = u32::try_from(bytes.len() - CSV_SPILL_HEADER)?;
    for (at, n) in std::iter::once(len).chain(cuts).enumerate() {
        bytes[4 * at..4 * at + 4].copy_from_slice(&n.to_le_bytes());
    }
    Ok(bytes)
}

/// Bytes before a spilled CSV row ([`csv_spill_record`]): its length and four cuts.
const CSV_SPILL_HEADER: usize = 20;

/// The row's length in a spilled CSV record's header ([`csv_spill_record`]).
fn spilled_row_len(header: &[u8; CSV_SPILL_HEADER]) -> usize {
    u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize
}

/// Writes the row of `record` (one whole [`csv_spill_record`]) with the column groups `keep`
/// says (see [`CsvLayout::groups`]), and its newline.
fn write_spilled_row(record: &[u8], keep: [bool; 5], out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let (header, row) = record
        .split_at_checked(CSV_SPILL_HEADER)
        .ok_or_else(|| anyhow::anyhow!("a spilled CSV row without its header"))?;
    let n = |at: usize| u32::from_le_bytes(header[4 * at..4 * at + 4].try_into().expect("4 bytes")) as usize;
    let ends = [n(1), n(2), n(3), n(4), n(0)];
    let mut start = 0;
    for (end, keep) in ends.into_iter().zip(keep) {
        if keep {
            out.write_all(
                row.get(start..end)
                    .ok_or_else(|| anyhow::anyhow!("a spilled CSV row is cut wrong"))?,
            )?;
        }
        start = end;
    }
    out.write_all(b"\n")?;
    Ok(())
}

/// One run as the report's JSON writes it among `runs`' elements (pretty-printed, two levels deep:
/// every line after the first indented by four spaces), and a NUL byte, which JSON text never
/// holds raw: what a large report spills for each run while it reads them, on the reading
/// threads ([`Spill::Json`]); [`write_json`] copies it in place.
///
/// # Errors
/// Only from serde_json.
pub fn json_spill_record(run: &RunSummary) -> anyhow::Result<Vec<u8>> {
    let mut bytes = two_levels_deep(run)?;
    bytes.push(JSON_SPILL_END);
    Ok(bytes)
}

/// The end of a run in the JSON spill ([`json_spill_record`]).
const JSON_SPILL_END: u8 = 0;

/// `v` as serde_json's pretty printer writes it two levels deep: `[[v]]` pretty-printed is `v`
/// so written between a fixed opening and closing, which are cut off (one `memmove`, where
/// indenting `v`'s own pretty text line by line read and copied it all).
///
/// # Errors
/// From serde_json; the pretty text is not framed as expected.
fn two_levels_deep(v: &impl serde::Serialize) -> anyhow::Result<Vec<u8>> {
    const OPENING: &[u8] = b"[\n  [\n    ";
    const CLOSING: &[u8] = b"\n  ]\n]";
    let mut bytes = serde_json::to_vec_pretty(&[[v]])?;
    if !(bytes.starts_with(OPENING) && bytes.ends_with(CLOSING)) {
        anyhow::bail!("serde_json pretty-printed a value two levels deep in another frame");
    }
    bytes.truncate(bytes.len() - CLOSING.len());
    bytes.drain(..OPENING.len());
    Ok(bytes)
}

/// What one run gave that the report cannot use, for CSV's `unusable_values`: its output's
/// unusable value (`a string for private_bytes`), the sample fields that were `null`, and the
/// `[report]` metrics that are not numbers (`load: null`), `; `-separated; empty for none.
fn run_unusable_text(run: &RunSummary) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let mut part = |args: std::fmt::Arguments<'_>| {
        if !text.is_empty() {
            text.push_str("; ");
        }
        text.write_fmt(args).expect("a String takes any text");
    };
    if let Some(u) = &run.unusable_output {
        part(format_args!("{u}"));
    }
    if let Some(ret) = &run.retention {
        for f in &ret.gaps.growth_null {
            part(format_args!("null for {f}"));
        }
        for f in ret
            .gaps
            .closed_null
            .iter()
            .filter(|f| !ret.gaps.growth_null.contains(f))
        {
            part(format_args!("null for {f} (closed sample)"));
        }
    }
    for (name, kind) in &run.unusable_metrics {
        part(format_args!("{name}: {kind}"));
    }
    text
}

/// The report as one pretty-printed JSON document (kebab-case keys).
///
/// # Errors
/// Only from serde_json.
pub fn report_json(r: &Report) -> anyhow::Result<String> {
    let mut out = Vec::new();
    write_json(r, &mut out)?;
    Ok(String::from_utf8(out)?)
}

/// [`report_json`] written to `out` as it is made (every run of a large bundle is read again, one
/// at a time: see [`super::model::Runs`]).
///
/// # Errors
/// From serde_json, `out`, or the bundle when a run can no longer be read.
pub fn write_json(r: &Report, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let mut out = std::io::BufWriter::new(out);
    let Some(spilled) = r.runs.spilled(Spill::Json).transpose()? else {
        serde_json::to_writer_pretty(&mut out, r)?;
        out.write_all(b"\n")?;
        out.flush()?;
        return Ok(());
    };
    // The runs were spilled while they were read, each as it is written here (the report
    // serializes them as `[]`): the document is written around them.
    let text = serde_json::to_string_pretty(r)?;
    let marker = "\n  \"runs\": []";
    let at = text
        .find(marker)
        .ok_or_else(|| anyhow::anyhow!("the report's JSON has no top-level runs"))?;
    out.write_all(&text.as_bytes()[..at + marker.len() - 1])?;
    let mut lines = std::io::BufReader::with_capacity(1 << 16, spilled);
    let mut run = Vec::new();
    let mut first = true;
    loop {
        run.clear();
        if lines.read_until(JSON_SPILL_END, &mut run)? == 0 {
            break;
        }
        out.write_all(if first { b"\n    " } else { b",\n    " })?;
        first = false;
        out.write_all(run.strip_suffix(&[JSON_SPILL_END]).unwrap_or(&run))?;
    }
    out.write_all(if first { b"]" } else { b"\n  ]" })?;
    out.write_all(&text.as_bytes()[at + marker.len()..])?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// JSON values with what trips a re-indenter: quotes, backslashes, braces, brackets, commas
    /// and colons inside strings, empty and nested containers, numbers of every kind.
    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|i| serde_json::json!(i)),
            any::<u64>().prop_map(|u| serde_json::json!(u)),
            (-1e300f64..1e300).prop_map(|x| serde_json::json!(x)),
            "[ -~]{0,12}|[\"\\\\{}\\[\\],:]{0,6}|\\PC{0,4}".prop_map(serde_json::Value::String),
            // Newlines and NULs inside strings: escaped, never the printer's own.
            "[a\\x00\\n\\r\\t]{0,4}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
                proptest::collection::vec(("[a-z\"{}:,\\\\]{0,5}", inner), 0..5)
                    .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// What CSV must quote or escape, and plain text; empty too.
    const CSV_TEXT: &str = "[a,\"\r\n ]{0,5}|[a-z0-9]{0,4}";

    proptest! {
        /// A spilled CSV row, cut by column group and joined again without some, is the row the
        /// layout writes itself, for every layout (node column or not, retention columns or not)
        /// and whatever the fields hold: the breaking pass of 2026-12-04 found a quoted field's
        /// closing quote in the next group, lost with it (a quoted `reason` before the left-out
        /// retention columns, a quoted last matrix value before the left-out `node`).
        #[test]
        fn a_spilled_csv_row_joined_is_the_layouts_own(
            a in CSV_TEXT,
            b in CSV_TEXT,
            node in proptest::option::of(CSV_TEXT),
            reason in proptest::option::of(CSV_TEXT),
            failed in any::<bool>(),
        ) {
            let mut run = RunSummary::for_tests(
                "0000-x",
                &[("a", a.as_str()), ("b", b.as_str())],
                Some(if failed { crate::bundle::Outcome::Failed } else { crate::bundle::Outcome::Ok }),
            );
            run.node = node;
            run.reason = reason;
            let keys = ["a".to_string(), "b".to_string()];
            let pointers = [("load".to_string(), "/load".to_string())];
            let record = csv_spill_record(&run, &keys, &pointers).unwrap();
            for (node, retention) in [(false, false), (false, true), (true, false), (true, true)] {
                let layout = CsvLayout { keys: &keys, node, retention, pointers: &pointers };
                let mut w = csv::Writer::from_writer(Vec::new());
                layout.write_fields(&run, |f| w.write_field(f)).unwrap();
                w.write_record(None::<&[u8]>).unwrap();
                let own = w.into_inner().unwrap();
                let mut joined = Vec::new();
                write_spilled_row(&record, layout.groups().map(|n| n > 0), &mut joined).unwrap();
                prop_assert_eq!(
                    String::from_utf8_lossy(&joined),
                    String::from_utf8_lossy(&own),
                    "node {} retention {}", node, retention
                );
                let parsed: Vec<csv::StringRecord> = csv::Reader::from_reader(
                    [layout.header().join(",").into_bytes(), b"\n".to_vec(), joined].concat().as_slice(),
                )
                .records()
                .collect::<Result<_, _>>()
                .unwrap();
                prop_assert_eq!(parsed.len(), 1);
            }
        }

        /// A value two levels deep is what serde_json's pretty printer writes of it as an element
        /// of the report's `runs` array; it holds no NUL, the spill's separator.
        #[test]
        fn a_value_two_levels_deep_is_serde_jsons_pretty_json_of_it_in_runs(v in json_value()) {
            let run = two_levels_deep(&v).unwrap();
            prop_assert!(!run.contains(&JSON_SPILL_END));
            let doc = serde_json::json!({ "runs": [v.clone(), v.clone()] });
            let mut out = b"{\n  \"runs\": [\n    ".to_vec();
            out.extend_from_slice(&run);
            out.extend_from_slice(b",\n    ");
            out.extend_from_slice(&run);
            out.extend_from_slice(b"\n  ]\n}");
            prop_assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string_pretty(&doc).unwrap());
        }
    }

    /// Each layout's columns, the groups of the full layout's it has (as a spilled row is cut),
    /// are its own header.
    #[test]
    fn every_layouts_columns_are_picked_from_the_full_ones() {
        let keys = ["mode".to_string(), "elements".to_string()];
        let pointers = [("load".to_string(), "/load_ms".to_string())];
        let full = CsvLayout::full(&keys, &pointers);
        let full_header = full.header();
        for node in [false, true] {
            for retention in [false, true] {
                let layout = CsvLayout {
                    keys: &keys,
                    node,
                    retention,
                    pointers: &pointers,
                };
                let mut picked: Vec<&String> = Vec::new();
                let mut columns = full_header.iter();
                for (mine, all) in layout.groups().into_iter().zip(full.groups()) {
                    let group = columns.by_ref().take(all);
                    if mine > 0 {
                        picked.extend(group);
                    } else {
                        group.for_each(drop);
                    }
                }
                assert!(columns.next().is_none(), "the groups cover every column");
                assert_eq!(
                    picked,
                    layout.header().iter().collect::<Vec<_>>(),
                    "{node} {retention}"
                );
            }
        }
    }
}
