//! The figures' SVG: deterministic, XML-safe, and a legend that never overlaps or loses an
//! entry.

use super::*;

fn figure() -> Figure {
    Figure {
        file: "plots/x.svg".into(),
        title: "A title".into(),
        x_desc: "step".into(),
        y_desc: "loss".into(),
        series: vec![
            Series {
                label: "a".into(),
                points: vec![(1.0, 9.5), (10.0, 7.25), (20.0, 6.0)],
                marked: false,
                colour: 0,
            },
            Series {
                label: "a (eval)".into(),
                points: vec![(10.0, 7.5), (20.0, 6.5)],
                marked: true,
                colour: 0,
            },
        ],
        unit_range: false,
        x_from_zero: true,
        caption: Some(TRAINING_CAPTION.into()),
    }
}

#[test]
fn svg_output_is_deterministic() {
    let a = figure().svg().unwrap();
    let b = figure().svg().unwrap();
    assert_eq!(a, b);
    assert!(a.starts_with("<svg"), "{}", &a[..60.min(a.len())]);
    assert!(a.contains("A title") && a.contains("held-out evaluations"));
    // No data still draws axes.
    let mut empty = figure();
    empty.series.clear();
    assert!(empty.is_empty());
    assert!(empty.svg().unwrap().contains("<svg"));
    assert_eq!(format_tick(200.0), "200");
    assert_eq!(format_tick(0.5), "0.5");
    assert_eq!(format_tick(0.30000000000000004), "0.3");
}

#[test]
fn control_characters_never_reach_the_svg() {
    let mut f = figure();
    f.title = "t\u{1b}]0;pwned\u{7} <&> \u{0}".into();
    f.y_desc = "y\u{8}\u{fffe}".into();
    f.series[0].label = "a\u{1b}[2J\u{9b}\n".into();
    let svg = f.svg().unwrap();
    let bad = svg.chars().find(|&c| {
        (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{fffe}' | '\u{ffff}')
    });
    assert_eq!(bad, None, "{svg}");
    assert!(svg.contains("\\u{1b}]0;pwned\\u{7} &lt;&amp;&gt;"), "{svg}");
}

/// The text elements of an SVG: (x, y, text).
fn texts(svg: &str) -> Vec<(i32, i32, String)> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let attr = |name: &str| -> Option<i32> {
                let at = t.find(&format!(" {name}=\""))? + name.len() + 3;
                t[at..].split('"').next()?.parse().ok()
            };
            let body = t.split('>').nth(1)?.split('<').next()?.trim().to_string();
            Some((attr("x")?, attr("y")?, body))
        })
        .collect()
}

#[test]
fn long_legend_labels_take_a_row_each_and_never_overlap() {
    let long = "cmnli/dev.tsv + ocnli/dev.tsv + cnsd_snli/dev.tsv + cnsd_snli/test.tsv (≤ 12,000) · pretrain@share_type=all".to_string();
    let mut f = figure();
    f.caption = Some("line with markers: our runs · thin line: the best baseline".into());
    f.series[0].label = long.clone();
    f.series[1].label = format!("best baseline (ngram_lr) · {long}");
    f.series[1].colour = 1;
    let svg = f.svg().unwrap();
    let legend: Vec<(i32, i32, String)> = texts(&svg)
        .into_iter()
        // Under the x axis's name: the caption and the legend.
        .filter(|(_, y, _)| *y > CHART_H as i32 - 6)
        .collect();
    assert_eq!(legend.len(), 3, "{legend:?}");
    assert!(legend[0].2.starts_with("line with markers: our runs"));
    // One column: every entry starts at the same x, each on its own row, and is cut to fit.
    assert_eq!(legend[1].0, legend[2].0);
    assert!(legend[1].1 < legend[2].1 && legend[0].1 < legend[1].1);
    for (_, _, text) in &legend[1..] {
        assert!(text.ends_with('…'), "{text}");
        let width = text_width(text, LEGEND_FONT);
        assert!(
            width <= (WIDTH as i32 - LEGEND_X - SAMPLE) as f64,
            "{text}: {width}"
        );
    }
    // Short labels share a row.
    assert!(figure().svg().unwrap().contains(TRAINING_CAPTION));
    let (layout, rows) = legend_layout(&["a".into(), "b".into(), "c".into()]);
    assert_eq!(rows, 2);
    assert_eq!((layout[1].0 > layout[0].0, layout[1].1), (true, 0));
}

#[test]
fn the_caption_appears_only_with_both_line_kinds() {
    let mut f = figure();
    f.series.remove(0);
    assert!(!f.svg().unwrap().contains(TRAINING_CAPTION));
    let mut f = figure();
    f.caption = None;
    assert!(!f.svg().unwrap().contains("thin line"));
}

#[test]
fn a_legend_of_many_long_labels_grows_the_figure_and_keeps_every_entry() {
    // 24 instances (six tasks × init × share type) overflowed a fixed-height figure.
    let mut f = figure();
    f.series = (0..24)
        .map(|i| Series {
            label: format!(
                "finetune_task_{i}@init=pretrained,seed=1,share_type=none · a long label"
            ),
            points: vec![(1.0, 0.5), (2.0, 0.6)],
            marked: true,
            colour: i,
        })
        .collect();
    let svg = f.svg().unwrap();
    let height = f.legend_height() + CHART_H;
    assert!(height > 24 * ROW_H as u32, "{height}");
    assert!(
        svg.contains(&format!("height=\"{height}\"")),
        "{}",
        &svg[..200]
    );
    let legend = texts(&svg)
        .into_iter()
        .filter(|(_, y, _)| *y > CHART_H as i32 - 6);
    assert_eq!(legend.count(), 24);
}
