//! The normaliser's tests: each step on its own, Traditional → Simplified, borrowing, and
//! idempotence.

use super::*;
use proptest::prelude::*;

fn norm(s: &str) -> String {
    Normalizer::new(NormalizeOptions::default())
        .unwrap()
        .normalize(s)
        .into_owned()
}

fn plain() -> Normalizer {
    Normalizer::new(NormalizeOptions {
        to_simplified: false,
        ..NormalizeOptions::default()
    })
    .unwrap()
}

#[test]
fn fullwidth_ascii_becomes_halfwidth_but_chinese_punctuation_stays() {
    assert_eq!(norm("１９９８年ＡＢＣｘｙｚ"), "1998年ABCxyz");
    assert_eq!(norm("５．５％＋＃＠～"), "5.5%+#@~");
    assert_eq!(
        norm("你好，世界！真的？是：对；（好）"),
        "你好，世界！真的？是：对；（好）"
    );
    assert_eq!(norm("一\u{3000}\u{3000}二"), "一 二");
}

#[test]
fn control_and_zero_width_characters_are_removed() {
    assert_eq!(norm("零\u{200B}宽\u{200C}字\u{200D}符\u{2060}"), "零宽字符");
    assert_eq!(norm("\u{FEFF}开头"), "开头");
    assert_eq!(norm("软\u{AD}连字符"), "软连字符");
    assert_eq!(norm("控\u{0}制\u{7}符\u{7F}\u{85}号\u{9F}"), "控制符 号");
    assert_eq!(norm("a\u{200E}b\u{202A}c\u{FE0F}"), "abc");
}

#[test]
fn whitespace_is_collapsed_and_trimmed() {
    assert_eq!(norm("  a \t\n b\u{A0}\u{2003}c  "), "a b c");
    assert_eq!(norm("\t\n"), "");
    assert_eq!(norm(""), "");
    assert_eq!(norm("一 \u{200B} 二"), "一 二");
}

#[test]
fn html_tags_and_entities_are_stripped() {
    assert_eq!(
        norm("第一行<br>第二行<br/>三<BR />四"),
        "第一行 第二行 三 四"
    );
    assert_eq!(norm("<p class=\"x\">段落</p>"), "段落");
    assert_eq!(
        norm("点击<a href='http://x.cn/?a=1&b=2'>这里</a>查看"),
        "点击这里查看"
    );
    assert_eq!(
        norm("鱼&amp;熊掌&nbsp;&lt;不可&gt;兼得"),
        "鱼&熊掌 <不可>兼得"
    );
    assert_eq!(norm("&quot;引号&quot;&#39;单&#39;"), "\"引号\"'单'");
    assert_eq!(norm("圆点&#183;号&#xB7;与&#20013;文"), "圆点·号·与中文");
    assert_eq!(norm("全角&#65297;&#65292;"), "全角1，");
    assert_eq!(norm("前&nbsp后"), "前 后");
    assert_eq!(norm("注<!-- 隐藏 -->释<ref name=x>来源</ref>"), "注释 来源");
    assert_eq!(norm("<nowiki>维基</nowiki>"), "维基");
}

#[test]
fn text_that_only_looks_like_html_stays() {
    for s in [
        "a<b 且 c>d",
        "书名<Breaking Away>",
        "1 < 2",
        "A&B公司",
        "&unknown;",
        "<br",
        "&#;",
        "&#x110000;",
    ] {
        assert_eq!(norm(s), s, "{s}");
    }
}

#[test]
fn traditional_becomes_simplified() {
    assert_eq!(norm("這個國家的歷史"), "这个国家的历史");
    assert_eq!(
        norm("數學是利用符號語言研究數量"),
        "数学是利用符号语言研究数量"
    );
    // Characters that change only inside a phrase.
    assert_eq!(norm("一目瞭然，反覆思量"), "一目了然，反复思量");
    // Off: left alone.
    assert_eq!(plain().normalize("這個國家").as_ref(), "這個國家");
    assert!(has_traditional("歷史").unwrap());
    assert!(!has_traditional("历史").unwrap());
    assert_eq!(to_simplified("國家").unwrap(), "国家");
}

#[test]
fn unchanged_text_is_borrowed() {
    let n = Normalizer::new(NormalizeOptions::default()).unwrap();
    for s in [
        "这是一个简单的句子。",
        "Plain ASCII text, one space.",
        "a b",
    ] {
        assert!(matches!(n.normalize(s), Cow::Borrowed(_)), "{s}");
    }
    // Trimming the ends alone still borrows.
    assert!(matches!(n.normalize("  中文  "), Cow::Borrowed("中文")));
    assert!(matches!(n.normalize("中  文"), Cow::Owned(_)));
}

#[test]
fn every_known_t2s_phrase_is_triggered() {
    // Phrases of OpenCC's TSPhrases whose characters t2s leaves alone one by one.
    for s in ["明瞭", "反覆", "找藉口", "沈船", "牴牾", "衹得"] {
        assert!(has_traditional(s).unwrap(), "{s}");
        assert_ne!(norm(s), s);
    }
}

#[test]
fn a_normalizer_is_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Normalizer>();
}

proptest! {
    #[test]
    fn output_is_trimmed_collapsed_and_idempotent(s in "[ a-z\u{3000}\u{200B}>/;#0-9中文國\u{FF10}-\u{FF19}\u{FF21}-\u{FF3A}！，\t\n]{0,40}") {
        // (No `&` or `<`: `&amp;lt;` and `<Ｂ>` change again on a second pass, by design.)
        let n = plain();
        let once = n.normalize(&s).into_owned();
        prop_assert!(!once.starts_with(' ') && !once.ends_with(' '));
        prop_assert!(!once.contains("  "));
        let bad = ['\t', '\n', '\u{3000}', '\u{200B}'];
        prop_assert!(!once.contains(bad), "{:?}", once);
        let twice = n.normalize(&once).into_owned();
        prop_assert_eq!(twice, once);
    }
}
