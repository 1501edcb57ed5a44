//! From a checked `pipeline.yaml` to the DAG of stage instances that `run` executes: variables
//! and `--set` overrides, `${vars.x}` / `${params.x}` substitution, matrix expansion, input globs,
//! cycle detection (petgraph) and target selection.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;
use serde_json::{Map, Value};

use crate::config::{PipelineFile, Resources, StageDecl};
use crate::error::{UserError, closest, suggestion};
use crate::stage::Registry;
use crate::yaml::{self, Mark};

mod checks;
mod coords;
mod expand;
mod inputs;
mod vars;
pub use coords::display_value;
use expand::{Expander, workspace_root};
pub use vars::subst_str;
use vars::{matrix_values, resolve_vars, subst_value};

/// `--set NAME=VALUE` flags, parsed.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// Name and value, in the order given: a var name, or `STAGE.PARAM`. A later flag for the
    /// same name wins.
    pub items: Vec<(String, Value)>,
}

impl Overrides {
    /// Parses `NAME=VALUE` flags; VALUE is read as a YAML scalar (or flow list), so
    /// `lr=2e-4` is a number and `share_type=[all,ffn]` a list.
    pub fn parse(flags: &[String]) -> Result<Overrides, UserError> {
        let mut items = Vec::new();
        for flag in flags {
            let Some((name, value)) = flag.split_once('=') else {
                return Err(UserError::new(format!("--set {flag}: expected NAME=VALUE"))
                    .with_help("e.g. `--set data=../shared/datasets` or `--set train.lr=2e-4`"));
            };
            let name = name.trim();
            if name.is_empty() {
                return Err(UserError::new(format!("--set {flag}: the name is empty")));
            }
            let value = match yaml::parse(value) {
                Ok(Some(node)) => node.to_json(),
                Ok(None) => Value::String(String::new()),
                // Anything YAML cannot read (say, a path with a colon and a space) is a string.
                Err(_) => Value::String(value.to_string()),
            };
            items.push((name.to_string(), value));
        }
        Ok(Overrides { items })
    }
}

/// One input file of an instance: `key` is how it is named in fingerprints and messages
/// (relative to the workspace root where possible), `path` is where it is read from.
#[derive(Debug, Clone)]
pub struct InputFile {
    /// The name in fingerprints and messages: relative to the workspace root, or the full
    /// path for a file outside it.
    pub key: String,
    /// Where the file is read from.
    pub path: PathBuf,
}

/// A stage after matrix expansion: what the executor runs.
#[derive(Debug, Clone)]
pub struct Instance {
    /// `train` or `train@lr=0.1,share_type=all`.
    pub name: String,
    /// The stage it expands (the name in `pipeline.yaml`).
    pub stage: String,
    /// The stage's kind, a name in the [`Registry`].
    pub kind: String,
    /// The matrix coordinates that name this instance (its own and those inherited from deps).
    pub coords: BTreeMap<String, Value>,
    /// The stage's params with `${...}` substituted and `--set` applied, its own matrix
    /// values, and the coordinates it inherits from its deps where it has no value of that
    /// name.
    pub params: Map<String, Value>,
    /// What a kind needs besides params: for `cmd`, the command and declared outputs.
    pub spec: Value,
    /// The files the stage's `inputs` match, sorted by key, without duplicates; the same for
    /// every instance of the stage.
    pub inputs: Vec<InputFile>,
    /// A missing input or a glob that matches nothing. It only matters when the instance is
    /// selected, so that `pipeline run mask` works on a data root without the fine-tuning sets.
    pub input_error: Option<UserError>,
    /// Indices in [`Plan::instances`] of the instances it needs: those of each dep stage
    /// whose coordinates agree with its own, or all of them for an aggregating stage.
    pub deps: Vec<usize>,
    /// The stage's `resources:`.
    pub resources: Resources,
    /// Where the stage's name is in the file, for errors about the instance.
    pub mark: Mark,
}

/// The expanded DAG. Instances are in topological order: every dep has a smaller index.
#[derive(Debug)]
pub struct Plan {
    /// The workspace root: the directory of `pipeline.yaml`, canonical where possible.
    pub root: PathBuf,
    /// The file it was built from.
    pub file: PipelineFile,
    /// Every var, resolved: `--set` applied and `${vars.x}` references substituted.
    pub vars: Map<String, Value>,
    /// Every instance of every stage.
    pub instances: Vec<Instance>,
}

impl Plan {
    /// Resolves the vars, applies `overrides`, checks the kinds (against `registry`), the
    /// deps and the params, and expands every stage into its instances. Any mistake is a
    /// [`UserError`], at its place in the file where it has one. A missing input is not: it
    /// is kept in [`Instance::input_error`] until the instance is selected.
    pub fn build(
        file: PipelineFile,
        overrides: &Overrides,
        registry: &Registry,
    ) -> Result<Plan, UserError> {
        let root = workspace_root(&file);
        let vars = resolve_vars(&file, overrides)?;
        let stage_overrides = stage_overrides(&file, &vars, overrides, registry)?;
        let index: HashMap<&str, usize> = file
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.value.as_str(), i))
            .collect();
        let order = stage_order(&file, &index, registry)?;
        let mut expander = Expander {
            file: &file,
            root: &root,
            vars: &vars,
            stage_overrides: &stage_overrides,
            registry,
            index: &index,
            instances: Vec::new(),
            by_stage: HashMap::new(),
            by_coords: HashMap::new(),
        };
        for &s in &order {
            expander.expand(s)?;
        }
        let instances = expander.instances;
        checks::unique_names(&file, &instances)?;
        Ok(Plan {
            root,
            file,
            vars,
            instances,
        })
    }

    /// The index of the instance named exactly `name` (`train@lr=0.1`, not a stage name).
    pub fn find(&self, name: &str) -> Option<usize> {
        self.instances.iter().position(|i| i.name == name)
    }

    /// The instances `targets` name (a stage name means all its instances) and everything they
    /// need, in topological order. No targets means every instance.
    pub fn select(&self, targets: &[String]) -> Result<Vec<usize>, UserError> {
        let mut wanted: HashSet<usize> = if targets.is_empty() {
            (0..self.instances.len()).collect()
        } else {
            HashSet::new()
        };
        for t in targets {
            let hits: Vec<usize> = (0..self.instances.len())
                .filter(|&i| self.instances[i].name == *t || self.instances[i].stage == *t)
                .collect();
            if hits.is_empty() {
                let mut names: Vec<&str> =
                    self.instances.iter().map(|i| i.stage.as_str()).collect();
                names.extend(self.instances.iter().map(|i| i.name.as_str()));
                names.dedup();
                let help = match closest(t, names.iter().copied()) {
                    Some(c) => format!("did you mean `{c}`?"),
                    None => "`pipeline dag` lists the stages".to_string(),
                };
                return Err(
                    UserError::new(format!("there is no stage or instance named `{t}`"))
                        .with_help(help),
                );
            }
            wanted.extend(hits);
        }
        let mut stack: Vec<usize> = wanted.iter().copied().collect();
        while let Some(i) = stack.pop() {
            for &d in &self.instances[i].deps {
                if wanted.insert(d) {
                    stack.push(d);
                }
            }
        }
        let mut out: Vec<usize> = wanted.into_iter().collect();
        out.sort_unstable();
        if let Some(e) = out
            .iter()
            .find_map(|&i| self.instances[i].input_error.as_ref())
        {
            return Err(e.clone());
        }
        Ok(out)
    }

    /// Instances that `targets` name directly (for `--force`).
    pub fn named(&self, targets: &[String]) -> HashSet<usize> {
        (0..self.instances.len())
            .filter(|&i| {
                targets
                    .iter()
                    .any(|t| self.instances[i].name == *t || self.instances[i].stage == *t)
            })
            .collect()
    }
}

/// `--set STAGE.PARAM=VALUE` overrides: parameter and value, by stage name.
type StageOverrides<'a> = HashMap<&'a str, Vec<(&'a str, &'a Value)>>;

/// A stage's matrix: each axis with its values.
type Matrix = Vec<(String, Vec<Value>)>;

/// The `--set STAGE.PARAM=VALUE` overrides by stage, each checked against the stage's params,
/// matrix axes and its kind's known params (`--set NAME=VALUE` for a var is `resolve_vars`'s).
fn stage_overrides<'a>(
    file: &'a PipelineFile,
    vars: &Map<String, Value>,
    overrides: &'a Overrides,
    registry: &Registry,
) -> Result<StageOverrides<'a>, UserError> {
    let mut stage_overrides = StageOverrides::new();
    for (name, value) in &overrides.items {
        if vars.contains_key(name) {
            continue;
        }
        let Some((stage, param)) = name.split_once('.') else {
            let names: Vec<&str> = vars.keys().map(String::as_str).collect();
            return Err(
                UserError::new(format!("--set {name}: there is no var named `{name}`")).with_help(
                    format!(
                        "{} (use `--set STAGE.PARAM=VALUE` for a stage parameter)",
                        suggestion(name, &names)
                    ),
                ),
            );
        };
        let Some(decl) = file.stages.iter().find(|s| s.name.value == stage) else {
            let names: Vec<&str> = file.stages.iter().map(|s| s.name.value.as_str()).collect();
            return Err(
                UserError::new(format!("--set {name}: there is no stage named `{stage}`"))
                    .with_help(suggestion(stage, &names)),
            );
        };
        let known = decl.params.iter().any(|(k, _)| k.value == param)
            || decl.matrix.iter().any(|(k, _)| k.value == param)
            || registry
                .get(&decl.kind.value)
                .is_some_and(|k| k.known_params().contains(&param));
        if !known {
            let mut names: Vec<&str> = decl.params.iter().map(|(k, _)| k.value.as_str()).collect();
            names.extend(decl.matrix.iter().map(|(k, _)| k.value.as_str()));
            if let Some(k) = registry.get(&decl.kind.value) {
                names.extend(k.known_params());
            }
            return Err(UserError::new(format!(
                "--set {name}: stage `{stage}` has no parameter `{param}`"
            ))
            .with_help(suggestion(param, &names)));
        }
        stage_overrides
            .entry(stage)
            .or_default()
            .push((param, value));
    }
    Ok(stage_overrides)
}

/// The stages in dependency order, after checking that every kind exists and every dep is a
/// stage, and that the dependencies have no cycle.
fn stage_order(
    file: &PipelineFile,
    index: &HashMap<&str, usize>,
    registry: &Registry,
) -> Result<Vec<usize>, UserError> {
    // Check kinds and deps, then order the stages (and find cycles) before expanding.
    let mut graph = DiGraph::<usize, ()>::new();
    let nodes: Vec<_> = (0..file.stages.len()).map(|i| graph.add_node(i)).collect();
    for (i, decl) in file.stages.iter().enumerate() {
        if registry.get(&decl.kind.value).is_none() {
            return Err(file
                .error_at(
                    decl.kind.mark,
                    format!(
                        "unknown stage kind `{}` in stage `{}`",
                        decl.kind.value, decl.name.value
                    ),
                )
                .with_help(suggestion(&decl.kind.value, &registry.kinds())));
        }
        for dep in &decl.deps {
            let Some(&j) = index.get(dep.value.as_str()) else {
                let names: Vec<&str> = index.keys().copied().collect();
                return Err(file
                    .error_at(
                        dep.mark,
                        format!(
                            "stage `{}` depends on `{}`, which is not a stage",
                            decl.name.value, dep.value
                        ),
                    )
                    .with_help(suggestion(&dep.value, &names)));
            };
            if j == i {
                return Err(file.error_at(
                    dep.mark,
                    format!("stage `{}` depends on itself (a cycle)", dep.value),
                ));
            }
            graph.add_edge(nodes[j], nodes[i], ());
        }
    }
    if petgraph::algo::toposort(&graph, None).is_err() {
        return Err(cycle_error(file, &graph));
    }
    Ok(stable_topo_order(&graph))
}

/// Kahn's algorithm taking the earliest-declared ready stage first, so instances keep the
/// order of the file wherever the deps allow it.
fn stable_topo_order(graph: &DiGraph<usize, ()>) -> Vec<usize> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut indegree: Vec<usize> = graph
        .node_indices()
        .map(|n| {
            graph
                .neighbors_directed(n, petgraph::Direction::Incoming)
                .count()
        })
        .collect();
    let mut ready: BinaryHeap<Reverse<usize>> = graph
        .node_indices()
        .filter(|n| indegree[n.index()] == 0)
        .map(|n| Reverse(n.index()))
        .collect();
    let mut order = Vec::with_capacity(indegree.len());
    while let Some(Reverse(i)) = ready.pop() {
        order.push(graph[petgraph::graph::NodeIndex::new(i)]);
        for next in graph.neighbors_directed(
            petgraph::graph::NodeIndex::new(i),
            petgraph::Direction::Outgoing,
        ) {
            indegree[next.index()] -= 1;
            if indegree[next.index()] == 0 {
                ready.push(Reverse(next.index()));
            }
        }
    }
    order
}

fn cycle_error(file: &PipelineFile, graph: &DiGraph<usize, ()>) -> UserError {
    // The smallest strongly connected component with more than one stage holds a cycle; walk
    // it from its first stage (in file order) to print one concrete loop.
    let scc = tarjan_scc(graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .min_by_key(|c| c.len())
        .unwrap_or_default();
    let members: HashSet<_> = scc.iter().copied().collect();
    let Some(&start) = scc.iter().min_by_key(|n| graph[**n]) else {
        return UserError::new("the stages' deps form a cycle");
    };
    let mut path = vec![start];
    let mut seen = HashSet::from([start]);
    let mut cur = start;
    // Follow edges backwards (stage → its dep) so the message reads "a needs b needs a".
    'walk: loop {
        for next in graph.neighbors_directed(cur, petgraph::Direction::Incoming) {
            if next == start {
                path.push(start);
                break 'walk;
            }
            if members.contains(&next) && seen.insert(next) {
                path.push(next);
                cur = next;
                continue 'walk;
            }
        }
        break;
    }
    let names: Vec<&str> = path
        .iter()
        .map(|n| file.stages[graph[*n]].name.value.as_str())
        .collect();
    let first = &file.stages[graph[start]];
    file.error_at(
        first.name.mark,
        format!("the stages' deps form a cycle: {}", names.join(" → ")),
    )
    .with_help("each stage must run after its deps; remove one of these deps")
}

/// A stage's params with `${vars.x}` substituted, and its matrix axes; a `--set STAGE.PARAM`
/// override sets a param, or narrows the matrix axis of that name to its value(s).
fn stage_params(
    file: &PipelineFile,
    decl: &StageDecl,
    vars: &Map<String, Value>,
    stage_overrides: &StageOverrides<'_>,
) -> Result<(Map<String, Value>, Matrix), UserError> {
    let mut params = Map::new();
    for (k, v) in &decl.params {
        params.insert(
            k.value.clone(),
            subst_value(file, k.mark, v.to_json(), vars)?,
        );
    }
    let mut matrix: Matrix = Vec::new();
    for (k, vs) in &decl.matrix {
        matrix.push((k.value.clone(), matrix_values(file, k, vs, vars)?));
    }
    for (param, value) in stage_overrides
        .get(decl.name.value.as_str())
        .into_iter()
        .flatten()
    {
        if let Some((_, values)) = matrix.iter_mut().find(|(k, _)| k == param) {
            // `--set train.share_type=ffn` narrows the matrix to that value.
            *values = match value {
                Value::Array(vs) => vs.clone(),
                v => vec![(*v).clone()],
            };
        } else {
            params.insert(param.to_string(), (*value).clone());
        }
    }
    for ((key, _), (_, values)) in decl.matrix.iter().zip(&matrix) {
        checks::distinct_values(file, decl, key, values)?;
    }
    Ok((params, matrix))
}

/// A param the stage's kind does not take (and no coordinate names) is an error at the key.
fn check_known_params(
    file: &PipelineFile,
    decl: &StageDecl,
    known: &[&str],
    coords: &BTreeMap<String, Value>,
) -> Result<(), UserError> {
    if known.is_empty() {
        return Ok(());
    }
    for (key, _) in &decl.params {
        if !known.contains(&key.value.as_str()) && !coords.contains_key(&key.value) {
            return Err(file
                .error_at(
                    key.mark,
                    format!(
                        "stage `{}` (kind {}) has no parameter `{}`",
                        decl.name.value, decl.kind.value, key.value
                    ),
                )
                .with_help(suggestion(&key.value, known)));
        }
    }
    Ok(())
}

fn kind_spec(
    file: &PipelineFile,
    decl: &StageDecl,
    vars: &Map<String, Value>,
    params: &Map<String, Value>,
) -> Result<Value, UserError> {
    let Some(cmd) = &decl.cmd else {
        return Ok(Value::Null);
    };
    let text = subst_str(file, cmd.mark, &cmd.value, vars, Some(params))?;
    let mut outs = Vec::new();
    for o in &decl.outs {
        let out = subst_str(file, o.mark, &o.value, vars, Some(params))?;
        if Path::new(&out).is_absolute() || out.split('/').any(|c| c == "..") {
            return Err(file.error_at(
                o.mark,
                format!("`outs` entry `{out}` must be a path inside $PIPELINE_OUT"),
            ));
        }
        outs.push(Value::String(out));
    }
    Ok(serde_json::json!({ "cmd": text, "outs": outs }))
}

#[cfg(test)]
mod tests;
