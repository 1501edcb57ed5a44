//! The corpus readers on each layout, invalid UTF-8, oversized documents and detection.

use super::*;

/// Paragraphs and first line of each document.
type Docs = Vec<(Vec<String>, u64)>;

fn read(text: &[u8], format: Format) -> (Docs, DocumentReader<&[u8]>) {
    let mut r = DocumentReader::new(text, Arc::from(Path::new("t.txt")), format);
    let docs = r
        .by_ref()
        .map(|d| {
            let d = d.unwrap();
            (d.paragraphs, d.line)
        })
        .collect();
    (docs, r)
}

fn paras(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn format_names_round_trip_through_serde_and_from_str() {
    for f in Format::ALL {
        let json = serde_json::to_string(&f).unwrap();
        assert_eq!(json, format!("\"{}\"", f.name()));
        assert_eq!(serde_json::from_str::<Format>(&json).unwrap(), f);
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
    }
    assert!(
        "Wiki"
            .parse::<Format>()
            .unwrap_err()
            .to_string()
            .contains("expected auto")
    );
}

#[test]
fn detects_wiki_paragraphs_and_lines() {
    let d = detect_format("\u{FEFF}<doc id=\"1\" title=\"x\">\nx\n".as_bytes(), true);
    assert_eq!(d.format, Format::Wiki);
    let d = detect_format("一\n二\n\n三\n\n四\n".as_bytes(), false);
    assert_eq!(d.format, Format::Paragraphs, "{}", d.reason);
    assert!(d.reason.contains("3 groups"), "{}", d.reason);
    let d = detect_format("一\n二\n三\n".as_bytes(), false);
    assert_eq!(d.format, Format::Lines);
    // Leading and trailing blank lines separate nothing.
    let d = detect_format("\n\n一\n二\n\n\n".as_bytes(), true);
    assert_eq!(d.format, Format::Lines);
    // One stray blank line: paragraphs in a small file, lines in a sample of a big one.
    let d = detect_format("一\n\u{3000}\n二\n".as_bytes(), true);
    assert_eq!(d.format, Format::Paragraphs);
    let d = detect_format("一\n\u{3000}\n二\n".as_bytes(), false);
    assert_eq!(d.format, Format::Lines);
    assert!(d.reason.contains("only one blank line"), "{}", d.reason);
}

#[test]
fn lines_are_documents() {
    let (docs, r) = read("第一篇\r\n\n  \n第二篇\n第三篇".as_bytes(), Format::Lines);
    assert_eq!(
        docs,
        [
            (paras(&["第一篇"]), 1),
            (paras(&["第二篇"]), 4),
            (paras(&["第三篇"]), 5)
        ]
    );
    assert_eq!(r.lines_read(), 5);
    assert_eq!(
        r.bytes_read(),
        "第一篇\r\n\n  \n第二篇\n第三篇".len() as u64
    );
}

#[test]
fn paragraphs_are_grouped_by_blank_lines() {
    let (docs, _) = read(
        "\n甲一\n甲二\n\n\n乙一\n \n丙一\n丙二".as_bytes(),
        Format::Paragraphs,
    );
    assert_eq!(
        docs,
        [
            (paras(&["甲一", "甲二"]), 2),
            (paras(&["乙一"]), 6),
            (paras(&["丙一", "丙二"]), 8)
        ]
    );
}

#[test]
fn wiki_blocks_are_documents_without_their_title_line() {
    let text = "<doc id=\"13\" url=\"u\" title=\"数学\">\n数学\n\n数学是一门学科。\n\n历史\n它很古老。\n</doc>\n\
                <doc id=\"14\" title=\"A &amp; B\">\nA & B\n正文\n</doc>\n\
                <doc id=\"15\" title=\"空\">\n空\n</doc>\n\
                <doc id=\"16\" title=\"无尾\">\n第一段\n";
    let (docs, r) = read(text.as_bytes(), Format::Auto);
    assert_eq!(r.format(), Format::Wiki);
    assert_eq!(
        docs,
        [
            (paras(&["数学是一门学科。", "历史", "它很古老。"]), 1),
            (paras(&["正文"]), 9),
            (paras(&["第一段"]), 16)
        ]
    );
}

#[test]
fn invalid_utf8_lines_are_counted_with_their_line_numbers() {
    let mut text = b"good one\n".to_vec();
    text.extend_from_slice(b"bad \xFF\xFE line\n");
    text.extend_from_slice("好的\n".as_bytes());
    text.extend_from_slice(b"\xE4\xB8\n");
    let (docs, r) = read(&text, Format::Lines);
    assert_eq!(docs, [(paras(&["good one"]), 1), (paras(&["好的"]), 3)]);
    assert_eq!(
        r.invalid_utf8(),
        &InvalidUtf8 {
            count: 2,
            lines: vec![2, 4]
        }
    );
    // In `paragraphs`, an invalid line neither ends a document nor adds to it.
    let mut text = "一\n".as_bytes().to_vec();
    text.extend_from_slice(b"\xFF\n");
    text.extend_from_slice("二\n".as_bytes());
    let (docs, r) = read(&text, Format::Paragraphs);
    assert_eq!(docs, [(paras(&["一", "二"]), 1)]);
    assert_eq!(r.invalid_utf8().lines, [2]);
}

#[test]
fn oversized_documents_are_cut() {
    let mut r = DocumentReader::new(
        "一一\n二二\n三三\n\n四\n".as_bytes(),
        Arc::from(Path::new("t")),
        Format::Paragraphs,
    )
    .with_max_doc_bytes(12);
    let docs: Vec<_> = r.by_ref().map(|d| d.unwrap()).collect();
    let got: Vec<_> = docs
        .iter()
        .map(|d| (d.paragraphs.clone(), d.line))
        .collect();
    assert_eq!(
        got,
        [
            (paras(&["一一", "二二"]), 1),
            (paras(&["三三"]), 3),
            (paras(&["四"]), 5)
        ]
    );
    assert_eq!(r.split_documents(), 1);
}

#[test]
fn open_detects_from_the_file_and_rewinds() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.txt");
    std::fs::write(&p, "甲\n\n乙\n\n丙\n").unwrap();
    let r = DocumentReader::open(&p, Format::Auto).unwrap();
    assert_eq!(r.format(), Format::Paragraphs);
    assert!(r.detection().is_some());
    let docs: Vec<_> = r.map(|d| d.unwrap().paragraphs).collect();
    assert_eq!(docs.len(), 3);
    assert_eq!(detect_file_format(&p).unwrap().format, Format::Paragraphs);
    assert!(DocumentReader::open(&dir.path().join("missing"), Format::Lines).is_err());
}

#[test]
fn a_line_longer_than_the_limit_is_an_error_naming_it() {
    // A line of 16 bytes and its line end (17 bytes read) is within a limit of 17.
    let r = DocumentReader::new(
        "甲乙\n0123456789abcdef\n丙\n".as_bytes(),
        Arc::from(Path::new("t")),
        Format::Lines,
    )
    .with_max_line_bytes(17);
    let docs: Vec<_> = r.map(|d| d.unwrap()).collect();
    assert_eq!(docs.len(), 3);
    let mut r = DocumentReader::new(
        "甲乙\n0123456789abcdefg\n丙\n".as_bytes(),
        Arc::from(Path::new("t")),
        Format::Lines,
    )
    .with_max_line_bytes(17);
    assert!(r.next().unwrap().is_ok());
    let e = r.next().unwrap().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(
        e.to_string(),
        "line 2 is longer than 17 bytes (is this a text file?)"
    );
    assert!(r.next().is_none(), "the reader stops at the error");
    // No line end at all (a device's endless bytes): the same error, in bounded memory.
    let endless = std::io::BufReader::new(std::io::repeat(b'x'));
    let mut r = DocumentReader::new(endless, Arc::from(Path::new("t")), Format::Lines)
        .with_max_line_bytes(1 << 20);
    let e = r.next().unwrap().unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 1 is longer than 1 MiB (is this a text file?)"
    );
}

#[test]
fn only_regular_files_are_opened() {
    let dir = tempfile::tempdir().unwrap();
    let Err(e) = DocumentReader::open(dir.path(), Format::Lines) else {
        panic!("a directory was opened as a corpus file")
    };
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        // Opening a FIFO with no writer would block forever: it is refused before the open.
        let Err(e) = DocumentReader::open(&fifo, Format::Lines) else {
            panic!("a FIFO was opened as a corpus file")
        };
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
