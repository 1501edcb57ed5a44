//! From a checked `pipeline.yaml` to the DAG of stage instances that `run` executes: variables
//! and `--set` overrides, `${vars.x}` / `${params.x}` substitution, matrix expansion, input globs,
//! cycle detection (petgraph) and target selection.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;
use serde_json::{Map, Value};

use crate::config::{Located, PipelineFile, Resources, StageDecl};
use crate::error::{UserError, closest, suggestion};
use crate::stage::Registry;
use crate::yaml::{self, Mark};

/// `--set NAME=VALUE` flags, parsed.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
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
    pub key: String,
    pub path: PathBuf,
}

/// A stage after matrix expansion: what the executor runs.
#[derive(Debug, Clone)]
pub struct Instance {
    /// `train` or `train@lr=0.1,share_type=all`.
    pub name: String,
    pub stage: String,
    pub kind: String,
    /// The matrix coordinates that name this instance (its own and those inherited from deps).
    pub coords: BTreeMap<String, Value>,
    pub params: Map<String, Value>,
    /// What a kind needs besides params: for `cmd`, the command and declared outputs.
    pub spec: Value,
    pub inputs: Vec<InputFile>,
    /// A missing input or a glob that matches nothing. It only matters when the instance is
    /// selected, so that `pipeline run mask` works on a data root without the fine-tuning sets.
    pub input_error: Option<UserError>,
    pub deps: Vec<usize>,
    pub resources: Resources,
    pub mark: Mark,
}

/// The expanded DAG. Instances are in topological order: every dep has a smaller index.
#[derive(Debug)]
pub struct Plan {
    pub root: PathBuf,
    pub file: PipelineFile,
    pub vars: Map<String, Value>,
    pub instances: Vec<Instance>,
}

impl Plan {
    pub fn build(
        file: PipelineFile,
        overrides: &Overrides,
        registry: &Registry,
    ) -> Result<Plan, UserError> {
        let root = file
            .path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let root = root.canonicalize().unwrap_or(root);
        let vars = resolve_vars(&file, overrides)?;
        let stage_overrides = stage_overrides(&file, &vars, overrides, registry)?;

        let index: HashMap<&str, usize> = file
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.value.as_str(), i))
            .collect();
        let order = stage_order(&file, &index, registry)?;

        let mut instances: Vec<Instance> = Vec::new();
        let mut by_stage: HashMap<usize, Vec<usize>> = HashMap::new();
        for &s in &order {
            let decl = &file.stages[s];
            let kind = registry.get(&decl.kind.value).expect("checked above");
            let mut params = Map::new();
            for (k, v) in &decl.params {
                params.insert(
                    k.value.clone(),
                    subst_value(&file, k.mark, v.to_json(), &vars)?,
                );
            }
            let mut matrix: Vec<(String, Vec<Value>)> = Vec::new();
            for (k, vs) in &decl.matrix {
                matrix.push((k.value.clone(), matrix_values(&file, k, vs, &vars)?));
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
            let aggregate = decl.aggregate.unwrap_or_else(|| kind.aggregates());

            // Inherited coordinates: the join of the deps' instances on shared axes.
            let mut inherited: Vec<BTreeMap<String, Value>> = vec![BTreeMap::new()];
            if !aggregate {
                for dep in &decl.deps {
                    let dep_instances = &by_stage[&index[dep.value.as_str()]];
                    let mut next = Vec::new();
                    for base in &inherited {
                        for &d in dep_instances {
                            if let Some(merged) = merge(base, &instances[d].coords)
                                && !next.contains(&merged)
                            {
                                next.push(merged);
                            }
                        }
                    }
                    inherited = next;
                }
            }
            let mut combos = Vec::new();
            for base in inherited {
                for own in product(&matrix) {
                    let own: BTreeMap<String, Value> = own.into_iter().collect();
                    if let Some(merged) = merge(&base, &own) {
                        combos.push((merged, own));
                    }
                }
            }
            let mut mine = Vec::new();
            for (coords, own) in combos {
                let name = instance_name(&decl.name.value, &coords);
                let mut inst_params = params.clone();
                for (k, v) in own {
                    inst_params.insert(k, v);
                }
                // Inherited coordinates too: `finetune@share_type=all` knows which model it has.
                for (k, v) in &coords {
                    inst_params.entry(k.clone()).or_insert_with(|| v.clone());
                }
                let known = kind.known_params();
                if !known.is_empty() {
                    for (key, _) in &decl.params {
                        if !known.contains(&key.value.as_str()) && !coords.contains_key(&key.value)
                        {
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
                }
                let mut deps = Vec::new();
                for dep in &decl.deps {
                    for &d in &by_stage[&index[dep.value.as_str()]] {
                        if aggregate
                            || merge(&coords, &instances[d].coords).as_ref() == Some(&coords)
                        {
                            deps.push(d);
                        }
                    }
                }
                let spec = kind_spec(&file, decl, &vars, &inst_params)?;
                kind.validate(&inst_params, &spec).map_err(|msg| {
                    file.error_at(decl.name.mark, format!("stage `{name}`: {msg}"))
                })?;
                let mut inputs = Vec::new();
                let mut excludes = Vec::new();
                let mut input_error = None;
                for pattern in &decl.inputs {
                    let p = subst_str(&file, pattern.mark, &pattern.value, &vars, None)?;
                    match p.strip_prefix('!') {
                        Some(negated) => excludes.push(exclusion(&file, &root, pattern, negated)?),
                        None => {
                            // A malformed pattern is a mistake in the file; a missing file is
                            // only a problem for runs that need this stage.
                            if is_glob(&p) {
                                check_glob(&file, pattern, &p)?;
                            }
                            match resolve_inputs(&file, &root, pattern, &p) {
                                Ok(found) => inputs.extend(found),
                                Err(e) => {
                                    input_error.get_or_insert(e);
                                }
                            }
                        }
                    }
                }
                inputs.retain(|i| !excludes.iter().any(|x| x.matches_path(&i.path)));
                inputs.sort_by(|a, b| a.key.cmp(&b.key));
                inputs.dedup_by(|a, b| a.key == b.key);
                mine.push(instances.len());
                instances.push(Instance {
                    name,
                    stage: decl.name.value.clone(),
                    kind: decl.kind.value.clone(),
                    coords,
                    params: inst_params,
                    spec,
                    inputs,
                    input_error,
                    deps,
                    resources: decl.resources,
                    mark: decl.name.mark,
                });
            }
            by_stage.insert(s, mine);
        }
        Ok(Plan {
            root,
            file,
            vars,
            instances,
        })
    }

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

fn merge(
    a: &BTreeMap<String, Value>,
    b: &BTreeMap<String, Value>,
) -> Option<BTreeMap<String, Value>> {
    let mut out = a.clone();
    for (k, v) in b {
        match out.get(k) {
            Some(existing) if existing != v => return None,
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Some(out)
}

fn product(matrix: &[(String, Vec<Value>)]) -> Vec<Vec<(String, Value)>> {
    let mut out = vec![Vec::new()];
    for (axis, values) in matrix {
        out = out
            .into_iter()
            .flat_map(|base| {
                values.iter().map(move |v| {
                    let mut next = base.clone();
                    next.push((axis.clone(), v.clone()));
                    next
                })
            })
            .collect();
    }
    out
}

pub fn display_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn instance_name(stage: &str, coords: &BTreeMap<String, Value>) -> String {
    if coords.is_empty() {
        return stage.to_string();
    }
    let parts: Vec<String> = coords
        .iter()
        .map(|(k, v)| format!("{k}={}", display_value(v)))
        .collect();
    format!("{stage}@{}", parts.join(","))
}

fn resolve_vars(
    file: &PipelineFile,
    overrides: &Overrides,
) -> Result<Map<String, Value>, UserError> {
    let mut raw: Vec<(Located<String>, Value)> = file
        .vars
        .iter()
        .map(|(k, v)| (k.clone(), v.to_json()))
        .collect();
    for (name, value) in &overrides.items {
        if let Some((_, v)) = raw.iter_mut().find(|(k, _)| k.value == *name) {
            *v = value.clone();
        }
    }
    // Vars may refer to other vars; resolve on demand, refusing loops.
    fn resolve(
        file: &PipelineFile,
        raw: &[(Located<String>, Value)],
        name: &str,
        done: &mut Map<String, Value>,
        active: &mut Vec<String>,
    ) -> Result<(), UserError> {
        if done.contains_key(name) {
            return Ok(());
        }
        let (key, value) = raw
            .iter()
            .find(|(k, _)| k.value == name)
            .expect("caller checks");
        if active.iter().any(|a| a == name) {
            active.push(name.to_string());
            return Err(file.error_at(
                key.mark,
                format!("vars refer to each other in a loop: {}", active.join(" → ")),
            ));
        }
        active.push(name.to_string());
        let mut refs = Vec::new();
        collect_var_refs(value, &mut refs);
        for r in refs {
            if raw.iter().any(|(k, _)| k.value == r) {
                resolve(file, raw, &r, done, active)?;
            }
        }
        let v = subst_value(file, key.mark, value.clone(), done)?;
        active.pop();
        done.insert(name.to_string(), v);
        Ok(())
    }
    let mut done = Map::new();
    for (k, _) in &raw {
        resolve(file, &raw, &k.value, &mut done, &mut Vec::new())?;
    }
    Ok(done)
}

/// A matrix axis's values: the list as written, or the list of the var it names
/// (`pretrain_step: ${vars.save_steps}`), which must hold scalars.
fn matrix_values(
    file: &PipelineFile,
    axis: &crate::config::Located<String>,
    items: &[crate::yaml::Node],
    vars: &Map<String, Value>,
) -> Result<Vec<Value>, UserError> {
    let mut values = Vec::new();
    for item in items {
        match subst_value(file, item.mark, item.to_json(), vars)? {
            Value::Array(list) => {
                if let Some(bad) = list.iter().find(|v| v.is_array() || v.is_object()) {
                    return Err(file.error_at(
                        item.mark,
                        format!(
                            "matrix axis `{}`: the var's values must be scalars, found {bad}",
                            axis.value
                        ),
                    ));
                }
                if list.is_empty() {
                    return Err(file.error_at(
                        item.mark,
                        format!("matrix axis `{}`: the var's list is empty", axis.value),
                    ));
                }
                values.extend(list);
            }
            Value::Object(_) => {
                return Err(file
                    .error_at(
                        item.mark,
                        format!(
                            "matrix axis `{}` must be a list of values; the var holds a map",
                            axis.value
                        ),
                    )
                    .with_help("give the var a list: `NAME: [a, b]`"));
            }
            v => values.push(v),
        }
    }
    Ok(values)
}

fn collect_var_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(start) = rest.find("${vars.") {
                let after = &rest[start + 7..];
                if let Some(end) = after.find('}') {
                    out.push(after[..end].to_string());
                    rest = &after[end..];
                } else {
                    break;
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_var_refs(i, out)),
        Value::Object(map) => map.values().for_each(|i| collect_var_refs(i, out)),
        _ => {}
    }
}

/// Substitutes `${vars.x}` in every string of `value`. A string that is exactly one reference
/// takes the var's type (so `lr: ${vars.lr}` stays a number).
fn subst_value(
    file: &PipelineFile,
    mark: Mark,
    value: Value,
    vars: &Map<String, Value>,
) -> Result<Value, UserError> {
    Ok(match value {
        Value::String(s) => {
            if let Some(name) = s.strip_prefix("${vars.").and_then(|r| r.strip_suffix('}'))
                && !name.contains('}')
                && let Some(v) = vars.get(name)
            {
                return Ok(v.clone());
            }
            Value::String(subst_str(file, mark, &s, vars, None)?)
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|i| subst_value(file, mark, i, vars))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| Ok((k, subst_value(file, mark, v, vars)?)))
                .collect::<Result<_, UserError>>()?,
        ),
        other => other,
    })
}

/// Substitutes `${vars.x}` and (where `params` is given) `${params.x}`; any other `${…}` is
/// left for the shell.
pub fn subst_str(
    file: &PipelineFile,
    mark: Mark,
    text: &str,
    vars: &Map<String, Value>,
    params: Option<&Map<String, Value>>,
) -> Result<String, UserError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let reference = &after[..end];
        let (table, name, scope) = if let Some(n) = reference.strip_prefix("vars.") {
            (Some(vars), n, "var")
        } else if let Some(n) = reference.strip_prefix("params.") {
            match params {
                Some(p) => (Some(p), n, "param"),
                None => {
                    return Err(file
                        .error_at(mark, format!("`${{{reference}}}` cannot be used here"))
                        .with_help("`${params.x}` works in `cmd`; elsewhere use `${vars.x}`"));
                }
            }
        } else {
            (None, reference, "")
        };
        match table {
            Some(t) => match t.get(name) {
                Some(v) => out.push_str(&display_value(v)),
                None => {
                    let names: Vec<&str> = t.keys().map(String::as_str).collect();
                    return Err(file
                        .error_at(
                            mark,
                            format!("undefined {scope} `{name}` in `${{{reference}}}`"),
                        )
                        .with_help(suggestion(name, &names)));
                }
            },
            None => {
                out.push_str("${");
                out.push_str(reference);
                out.push('}');
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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

fn resolve_inputs(
    file: &PipelineFile,
    root: &Path,
    pattern: &Located<String>,
    expanded: &str,
) -> Result<Vec<InputFile>, UserError> {
    let full = if Path::new(expanded).is_absolute() {
        PathBuf::from(expanded)
    } else {
        root.join(expanded)
    };
    let mut files = Vec::new();
    if is_glob(expanded) {
        let paths = glob::glob(&full.to_string_lossy()).map_err(|e| {
            file.error_at(
                pattern.mark,
                format!("input pattern `{expanded}` is not a valid glob: {}", e.msg),
            )
        })?;
        for p in paths.flatten() {
            collect_files(&p, &mut files);
        }
        if files.is_empty() {
            return Err(file
                .error_at(
                    pattern.mark,
                    format!("input pattern `{expanded}` matches no file"),
                )
                .with_help(format!("it was looked up relative to {}", root.display())));
        }
    } else {
        if !full.exists() {
            return Err(file
                .error_at(pattern.mark, format!("input `{expanded}` does not exist"))
                .with_help(format!("it was looked up as {}", full.display())));
        }
        collect_files(&full, &mut files);
    }
    Ok(files
        .into_iter()
        .map(|path| {
            let key = match path.strip_prefix(root) {
                Ok(rel) => rel.to_string_lossy().into_owned(),
                Err(_) => path.to_string_lossy().into_owned(),
            };
            InputFile { key, path }
        })
        .collect())
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '['])
}

/// Errors point into the pattern as the user wrote it, not the absolute path built from it.
fn check_glob(
    file: &PipelineFile,
    pattern: &Located<String>,
    expanded: &str,
) -> Result<glob::Pattern, UserError> {
    glob::Pattern::new(expanded).map_err(|e| {
        file.error_at(
            pattern.mark,
            format!(
                "input pattern `{expanded}` is not a valid glob: {} (at character {})",
                e.msg,
                e.pos + 1
            ),
        )
    })
}

/// `!PATTERN` in `inputs` drops the files it matches from those the other patterns found
/// (`["data/*/*.txt", "!data/*/SOURCE.txt"]`). It may match nothing.
fn exclusion(
    file: &PipelineFile,
    root: &Path,
    pattern: &Located<String>,
    negated: &str,
) -> Result<glob::Pattern, UserError> {
    check_glob(file, pattern, negated)?;
    let full = if Path::new(negated).is_absolute() {
        PathBuf::from(negated)
    } else {
        root.join(negated)
    };
    check_glob(file, pattern, &full.to_string_lossy())
}

/// A file, or every file below a directory (skipping the pipeline's own state and VCS dirs).
fn collect_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        let mut children: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        children.sort();
        for child in children {
            let name = child
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name == ".pipeline" || name == ".git" {
                continue;
            }
            collect_files(&child, out);
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Registry;

    fn plan(text: &str, sets: &[&str]) -> Result<Plan, UserError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pipeline.yaml");
        std::fs::write(&path, text).unwrap();
        std::fs::write(dir.path().join("a.txt"), "x").unwrap();
        let file = PipelineFile::load(&path)?;
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Plan::build(file, &Overrides::parse(&sets)?, &Registry::builtin())
    }

    #[test]
    fn matrix_expands_and_dependents_follow() {
        let p = plan(
            "stages:\n  pre:\n    cmd: x\n    matrix: {share: [all, ffn]}\n  ft:\n    cmd: y\n    deps: [pre]\n  rep:\n    cmd: z\n    deps: [ft]\n    aggregate: true\n",
            &[],
        )
        .unwrap();
        let names: Vec<&str> = p.instances.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "pre@share=all",
                "pre@share=ffn",
                "ft@share=all",
                "ft@share=ffn",
                "rep"
            ]
        );
        assert_eq!(p.instances[2].deps, [0]);
        assert_eq!(p.instances[3].deps, [1]);
        assert_eq!(p.instances[4].deps, [2, 3]);
        assert_eq!(p.instances[0].params["share"], "all");
    }

    #[test]
    fn a_matrix_axis_may_take_a_list_var_and_set_changes_it() {
        let text = "vars: {steps: [5, 10]}\nstages:\n  t:\n    cmd: x\n    matrix:\n      step: ${vars.steps}\n";
        let names = |p: Plan| -> Vec<String> { p.instances.into_iter().map(|i| i.name).collect() };
        assert_eq!(names(plan(text, &[]).unwrap()), ["t@step=5", "t@step=10"]);
        assert_eq!(names(plan(text, &["steps=[7]"]).unwrap()), ["t@step=7"]);
        assert_eq!(
            plan(text, &["steps=3"]).unwrap().instances[0].params["step"],
            3
        );
        for (set, want) in [
            ("steps=[]", "the var's list is empty"),
            ("steps=[[1]]", "must be scalars"),
            ("steps={a: 1}", "the var holds a map"),
        ] {
            let e = plan(text, &[set]).unwrap_err().to_string();
            assert!(
                e.contains(want) && e.contains("pipeline.yaml:6"),
                "{set}: {e}"
            );
        }
        let e = plan(&text.replace("vars.steps", "vars.stepz"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("stepz"), "{e}");
    }

    #[test]
    fn two_axes_make_a_product_and_set_narrows_one() {
        let text = "stages:\n  t:\n    cmd: x\n    matrix: {a: [1, 2], b: [x, y]}\n";
        assert_eq!(plan(text, &[]).unwrap().instances.len(), 4);
        let p = plan(text, &["t.a=2"]).unwrap();
        let names: Vec<&str> = p.instances.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["t@a=2,b=x", "t@a=2,b=y"]);
    }

    #[test]
    fn vars_substitute_with_types_and_overrides() {
        let text = "vars: {lr: 0.1, dir: d, path: '${vars.dir}/x'}\nstages:\n  t:\n    cmd: echo ${params.lr} ${vars.path} ${HOME}\n    params: {lr: '${vars.lr}'}\n";
        let p = plan(text, &[]).unwrap();
        assert_eq!(p.instances[0].params["lr"], 0.1);
        assert_eq!(p.instances[0].spec["cmd"], "echo 0.1 d/x ${HOME}");
        let p = plan(text, &["lr=2e-4", "t.lr=5"]).unwrap();
        assert_eq!(p.instances[0].params["lr"], 5);
    }

    #[test]
    fn cycles_are_printed() {
        let e = plan(
            "stages:\n  a:\n    cmd: x\n    deps: [b]\n  b:\n    cmd: y\n    deps: [a]\n",
            &[],
        )
        .unwrap_err();
        assert!(e.message.contains("cycle: a → b → a"), "{e}");
    }

    #[test]
    fn select_takes_ancestors_only() {
        let p = plan(
            "stages:\n  a:\n    cmd: x\n  b:\n    cmd: y\n    deps: [a]\n  c:\n    cmd: z\n",
            &[],
        )
        .unwrap();
        assert_eq!(p.select(&["b".into()]).unwrap(), [0, 1]);
        assert!(
            p.select(&["bb".into()])
                .unwrap_err()
                .help
                .unwrap()
                .contains("`b`")
        );
    }

    #[test]
    fn unknown_names_are_errors() {
        assert!(
            plan("stages:\n  a:\n    cmd: x\n", &["nope=1"])
                .unwrap_err()
                .message
                .contains("no var named `nope`")
        );
        assert!(
            plan(
                "stages:\n  a:\n    cmd: x\n    params: {lr: 1}\n",
                &["a.lx=1"]
            )
            .unwrap_err()
            .help
            .unwrap()
            .contains("`lr`")
        );
        assert!(
            plan("stages:\n  a:\n    cmd: echo ${vars.nope}\n", &[])
                .unwrap_err()
                .message
                .contains("undefined var `nope`")
        );
        // A missing input is an error only for a run that needs the stage.
        let p = plan(
            "stages:\n  a:\n    cmd: x\n    inputs: ['*.zip']\n  b:\n    cmd: y\n  c:\n    cmd: z\n    deps: [a]\n",
            &[],
        )
        .unwrap();
        assert_eq!(p.select(&["b".into()]).unwrap(), [1]);
        for targets in [vec![], vec!["a".to_string()], vec!["c".to_string()]] {
            let e = p.select(&targets).unwrap_err();
            assert!(e.message.contains("matches no file"), "{targets:?}: {e:?}");
            assert_eq!(e.location.unwrap().1.line, 4);
        }
    }

    #[test]
    fn negated_inputs_drop_what_they_match() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["d/a.txt", "d/b.txt", "d/SOURCE.txt"] {
            std::fs::create_dir_all(dir.path().join("d")).unwrap();
            std::fs::write(dir.path().join(f), f).unwrap();
        }
        let path = dir.path().join("pipeline.yaml");
        std::fs::write(
            &path,
            "stages:\n  a:\n    cmd: x\n    inputs: ['d/*.txt', '!d/SOURCE.txt', '!nothing/*']\n",
        )
        .unwrap();
        let file = PipelineFile::load(&path).unwrap();
        let p = Plan::build(file, &Overrides::parse(&[]).unwrap(), &Registry::builtin()).unwrap();
        let keys: Vec<&str> = p.instances[0]
            .inputs
            .iter()
            .map(|i| i.key.as_str())
            .collect();
        assert_eq!(keys, ["d/a.txt", "d/b.txt"]);
    }
}
