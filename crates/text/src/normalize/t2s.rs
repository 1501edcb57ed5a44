//! Traditional → Simplified Chinese with OpenCC's `t2s` (`ferrous-opencc`), run only on the
//! runs of ideographs that hold a character the conversion could change.

use std::borrow::Cow;
use std::sync::OnceLock;

use ferrous_opencc::OpenCC;
use ferrous_opencc::config::BuiltinConfig;

/// The Traditional → Simplified converter could not be built (its embedded dictionaries did not
/// load: a broken build of `ferrous-opencc`, not bad input).
#[derive(Debug, thiserror::Error)]
#[error("could not load the OpenCC t2s dictionaries: {0}")]
pub struct T2sError(String);

/// The OpenCC `t2s` converter and the characters that can start a change.
pub(super) struct T2s {
    cc: OpenCC,
    pub(super) triggers: Triggers,
}

/// Characters in whose presence t2s may change a text (a bit set over U+0000–U+2FFFF).
pub(super) struct Triggers {
    bits: Vec<u64>,
}

impl Triggers {
    #[inline]
    pub(super) fn contains(&self, c: char) -> bool {
        let u = c as usize;
        self.bits
            .get(u >> 6)
            .is_some_and(|w| (w >> (u & 63)) & 1 == 1)
    }
}

static T2S: OnceLock<Result<T2s, String>> = OnceLock::new();

/// Characters that t2s leaves alone on their own but changes inside a phrase of OpenCC's
/// `TSPhrases` (瞭 in 明瞭 → 明了, 覆 in 反覆 → 反复, …). Found by diffing `TSPhrases.txt`
/// against `TSCharacters.txt` of ferrous-opencc 0.4.0; a test checks every phrase we know of.
const PHRASE_ONLY_TRIGGERS: &str = "沈牴瞭藉衹覆";

/// Code points probed for single-character conversions: CJK Extension A and the unified block,
/// compatibility ideographs, and the supplementary ideographic planes (OpenCC's t2s keys lie
/// in U+346E–U+2B726).
const PROBE_RANGES: [(u32, u32); 3] = [(0x3400, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FFFF)];

/// Whether OpenCC's t2s dictionaries hold `c` in a key: all their keys are made of CJK
/// ideographs (checked by a test), so no match spans anything else.
#[inline]
fn is_ideograph(c: char) -> bool {
    PROBE_RANGES
        .iter()
        .any(|&(a, b)| (a..=b).contains(&(c as u32)))
}

impl T2s {
    /// Converts each run of ideographs that holds a trigger, copying the rest: the same result
    /// as converting the whole text (a dictionary match never crosses a non-ideograph), for a
    /// fraction of the work when a text has a single Traditional character. `None` when nothing
    /// changed.
    pub(super) fn convert_runs(&self, text: &str) -> Option<String> {
        let mut out: Option<String> = None;
        let mut copied = 0;
        let mut run_start: Option<usize> = None;
        let mut run_has_trigger = false;
        // A sentinel non-ideograph at the end closes the last run.
        for (i, c) in text
            .char_indices()
            .chain(std::iter::once((text.len(), ' ')))
        {
            let ideograph = i < text.len() && is_ideograph(c);
            if ideograph {
                if run_start.is_none() {
                    run_start = Some(i);
                    run_has_trigger = false;
                }
                run_has_trigger |= self.triggers.contains(c);
                continue;
            }
            if let Some(start) = run_start.take()
                && run_has_trigger
            {
                let run = &text[start..i];
                let converted = self.cc.convert(run);
                if converted != run {
                    let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
                    o.push_str(&text[copied..start]);
                    o.push_str(&converted);
                    copied = i;
                }
            }
        }
        out.map(|mut o| {
            o.push_str(&text[copied..]);
            o
        })
    }

    /// The process's converter, loaded on first use.
    pub(super) fn get() -> Result<&'static T2s, T2sError> {
        T2S.get_or_init(|| {
            let cc = OpenCC::from_config(BuiltinConfig::T2s).map_err(|e| e.to_string())?;
            let triggers = Triggers::probe(&cc);
            Ok(T2s { cc, triggers })
        })
        .as_ref()
        .map_err(|e| T2sError(e.clone()))
    }
}

impl Triggers {
    /// Asks the converter which characters it changes on their own, in one call: candidates
    /// separated by newlines (no dictionary key holds a newline, so each converts alone).
    /// Cheaper and sturdier than reading OpenCC's dictionaries, which the crate keeps private.
    fn probe(cc: &OpenCC) -> Triggers {
        let mut bits = vec![0u64; 0x30000 / 64];
        let mut set = |c: char| bits[c as usize >> 6] |= 1 << (c as usize & 63);
        let candidates: Vec<char> = PROBE_RANGES
            .iter()
            .flat_map(|&(a, b)| (a..=b).filter_map(char::from_u32))
            .collect();
        let mut joined = String::with_capacity(candidates.len() * 5);
        for &c in &candidates {
            joined.push(c);
            joined.push('\n');
        }
        let converted = cc.convert(&joined);
        for (&c, piece) in candidates.iter().zip(converted.split('\n')) {
            if piece.chars().ne(std::iter::once(c)) {
                set(c);
            }
        }
        for c in PHRASE_ONLY_TRIGGERS.chars() {
            set(c);
        }
        Triggers { bits }
    }
}

/// Whether t2s could change `text` (it holds a Traditional character, or one of the few that
/// only change inside a phrase). Loads the converter on first use.
pub fn has_traditional(text: &str) -> Result<bool, T2sError> {
    let t2s = T2s::get()?;
    Ok(text.chars().any(|c| t2s.triggers.contains(c)))
}

/// Traditional → Simplified alone (OpenCC `t2s`), skipping texts it cannot change.
pub fn to_simplified(text: &str) -> Result<Cow<'_, str>, T2sError> {
    if !has_traditional(text)? {
        return Ok(Cow::Borrowed(text));
    }
    let t2s = T2s::get()?;
    Ok(t2s
        .convert_runs(text)
        .map_or(Cow::Borrowed(text), Cow::Owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converting_runs_of_ideographs_equals_converting_the_whole() {
        let t2s = T2s::get().unwrap();
        for text in [
            "數學，是利用符號語言研究數量、結構。A&B 歷史1998年",
            "一目瞭然的反覆思量，沈船與藉口",
            "这是简体，这個是繁體，最後是English words和數字123。",
            "乾隆年間的乾燥天氣",
        ] {
            let whole = t2s.cc.convert(text);
            let runs = t2s.convert_runs(text).unwrap_or_else(|| text.to_string());
            assert_eq!(runs, whole, "{text}");
        }
        assert!(t2s.convert_runs("全是简体字，没有繁体。").is_none());
    }
}
