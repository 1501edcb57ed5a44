//! The `remotes:` block of `pipeline.yaml`: names → URLs or directories, and which one is the
//! default; read with every mistake naming its line. What a run does with a remote is in
//! [`crate::remote`].

use std::path::Path;

use crate::error::{UserError, suggestion};
use crate::yaml::{Located, Node, NodeValue};

/// The key of the `remotes:` block that names the default remote instead of declaring one.
pub const DEFAULT_KEY: &str = "default";

/// `remotes: {lab: s3://bucket/prefix, nfs: /mnt/shared/store, default: lab}`.
#[derive(Debug, Clone, Default)]
pub struct Remotes {
    /// Name → URL (`s3://…`, `file://…`) or directory, as written.
    pub entries: Vec<(Located<String>, Located<String>)>,
    /// The remote `push`, `pull` and `run` use without `--remote`: `default:`, or the only one.
    pub default: Option<String>,
}

impl Remotes {
    /// The URL or directory of the remote named `name`; `None` if no remote has that name.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n.value == name)
            .map(|(_, url)| url.value.as_str())
    }

    /// The declared remotes' names, in the file's order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|(n, _)| n.value.as_str()).collect()
    }
}

/// Reads the `remotes:` block; every mistake names its line.
pub fn parse_remotes(path: &Path, source: &str, node: &Node) -> Result<Remotes, UserError> {
    let err = |mark, msg: String| UserError::at(path, source, mark, msg);
    let mut remotes = Remotes::default();
    if node.is_null() {
        return Ok(remotes);
    }
    let NodeValue::Map(pairs) = &node.value else {
        return Err(err(
            node.mark,
            format!("`remotes` must be a mapping, found {}", node.type_name()),
        )
        .with_help(
            "e.g. `remotes: {lab: s3://bucket/prefix, nfs: /mnt/shared/store, default: lab}`",
        ));
    };
    let mut default: Option<Located<String>> = None;
    for (k, v) in pairs.iter() {
        let (Some(name), Some(value)) = (k.scalar_text(), v.scalar_text()) else {
            return Err(err(
                v.mark,
                format!("each remote is `NAME: URL`, found {}", v.type_name()),
            ));
        };
        if v.is_null() || value.is_empty() {
            return Err(err(v.mark, format!("remote `{name}` has no URL")));
        }
        let located = |text: &str, n: &Node| Located {
            value: text.to_string(),
            mark: n.mark,
        };
        if name == DEFAULT_KEY {
            default = Some(located(value, v));
            continue;
        }
        if remotes.entries.iter().any(|(n, _)| n.value == name) {
            return Err(err(k.mark, format!("duplicate remote `{name}`")));
        }
        if let Some(why) = credentials_in_url(value) {
            return Err(err(v.mark, format!("remote `{name}`: {why}")).with_help(CREDENTIALS_HELP));
        }
        remotes.entries.push((located(name, k), located(value, v)));
    }
    remotes.default = match default {
        Some(d) if remotes.get(&d.value).is_none() => {
            let hint = suggestion(&d.value, &remotes.names());
            return Err(err(
                d.mark,
                format!("the default remote `{}` is not declared", d.value),
            )
            .with_help(hint));
        }
        Some(d) => Some(d.value),
        None if remotes.entries.len() == 1 => Some(remotes.entries[0].0.value.clone()),
        None => None,
    };
    Ok(remotes)
}

/// Where a user is told to put credentials instead of a URL.
pub const CREDENTIALS_HELP: &str = "credentials never go in pipeline.yaml or a URL: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE with ~/.aws/credentials) in the environment";

/// Why `url` carries credentials (`s3://KEY:SECRET@bucket`, `?secret_access_key=`), if it does.
pub fn credentials_in_url(url: &str) -> Option<&'static str> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Some("the URL holds credentials (`user:secret@`)");
    }
    let query = rest.split_once('?').map(|(_, q)| q.to_ascii_lowercase());
    let secret = ["key", "secret", "token", "password", "credential"];
    if query.is_some_and(|q| secret.iter().any(|s| q.contains(s))) {
        return Some("the URL's query holds credentials");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Remotes, UserError> {
        let node = crate::yaml::parse(text).unwrap().unwrap();
        parse_remotes(Path::new("pipeline.yaml"), text, &node)
    }

    #[test]
    fn one_remote_is_the_default() {
        let r = parse("{lab: s3://b/p}").unwrap();
        assert_eq!(r.default.as_deref(), Some("lab"));
        assert_eq!(r.get("lab"), Some("s3://b/p"));
        let r = parse("{lab: s3://b/p, nfs: /mnt/x}").unwrap();
        assert_eq!(r.default, None);
        let r = parse("{lab: s3://b/p, nfs: /mnt/x, default: nfs}").unwrap();
        assert_eq!(r.default.as_deref(), Some("nfs"));
    }

    #[test]
    fn mistakes_name_the_line() {
        let e = parse("lab: s3://b/p\nnfs: /x\ndefault: lap\n").unwrap_err();
        assert_eq!(e.location.unwrap().1.line, 3, "{}", e.message);
        assert!(e.help.unwrap().contains("`lab`"));
        let e = parse("lab: s3://AKIA:secret@b/p\n").unwrap_err();
        assert!(e.message.contains("credentials"), "{}", e.message);
        let e = parse("lab: [a]\n").unwrap_err();
        assert!(e.message.contains("NAME: URL"), "{}", e.message);
    }

    #[test]
    fn credentials_are_found_in_urls() {
        assert!(credentials_in_url("s3://k:s@bucket/p").is_some());
        assert!(credentials_in_url("s3://bucket/p?secret_access_key=x").is_some());
        assert!(credentials_in_url("s3://bucket/a@b").is_none());
        assert!(credentials_in_url("/mnt/shared@x").is_none());
    }
}
