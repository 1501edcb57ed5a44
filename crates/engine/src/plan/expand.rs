//! Matrix expansion: each stage, in dependency order, over its matrix and the coordinates it
//! inherits from its deps, into the plan's instances.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::coords::{CoordIndex, combine, inherited_coords, instance_name};
use super::inputs::inputs_of;
use super::{
    InputFile, Instance, StageOverrides, check_known_params, checks, kind_spec, stage_params,
};
use crate::config::{Located, PipelineFile, StageDecl};
use crate::error::UserError;
use crate::stage::Registry;

/// The pipeline file's directory, canonical where it can be.
pub(super) fn workspace_root(file: &PipelineFile) -> PathBuf {
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
    root.canonicalize().unwrap_or(root)
}

/// Expands the stages, in dependency order, into instances: each stage over its matrix and the
/// coordinates it inherits from its deps.
pub(super) struct Expander<'a> {
    pub(super) file: &'a PipelineFile,
    pub(super) root: &'a Path,
    pub(super) vars: &'a Map<String, Value>,
    pub(super) stage_overrides: &'a StageOverrides<'a>,
    pub(super) registry: &'a Registry,
    pub(super) index: &'a HashMap<&'a str, usize>,
    pub(super) instances: Vec<Instance>,
    pub(super) by_stage: HashMap<usize, Vec<usize>>,
    pub(super) by_coords: HashMap<usize, CoordIndex>,
}

impl Expander<'_> {
    /// Adds the instances of stage `s` (its deps' instances are in already).
    pub(super) fn expand(&mut self, s: usize) -> Result<(), UserError> {
        let file = self.file;
        let decl = &file.stages[s];
        let kind = self.registry.get(&decl.kind.value).expect("checked above");
        let (params, matrix) = stage_params(file, decl, self.vars, self.stage_overrides)?;
        let aggregate = decl.aggregate.unwrap_or_else(|| kind.aggregates());
        let inherited = if aggregate {
            vec![BTreeMap::new()]
        } else {
            let by_stage = &self.by_stage;
            let index = self.index;
            inherited_coords(
                decl.deps
                    .iter()
                    .map(|dep| &by_stage[&index[dep.value.as_str()]]),
                &self.instances,
            )
        };
        // The same files for every instance of the stage: globbed once, when the first
        // instance has been validated.
        let mut stage_inputs: Option<(Vec<InputFile>, Option<UserError>)> = None;
        let mut mine = Vec::new();
        for (coords, own) in combine(inherited, &matrix) {
            let mut inst_params = params.clone();
            inst_params.extend(own);
            // Inherited coordinates too: `finetune@share_type=all` knows which model it has.
            for (k, v) in &coords {
                inst_params.entry(k.clone()).or_insert_with(|| v.clone());
            }
            let inst = self.instance(decl, aggregate, coords, inst_params, &mut stage_inputs)?;
            mine.push(self.instances.len());
            self.instances.push(inst);
        }
        self.by_coords
            .insert(s, CoordIndex::new(&mine, &self.instances));
        self.by_stage.insert(s, mine);
        Ok(())
    }

    /// One instance: its deps (all of theirs for an aggregating stage, else those with
    /// matching coordinates), its spec, validated by its kind, and the stage's inputs.
    fn instance(
        &self,
        decl: &StageDecl,
        aggregate: bool,
        coords: BTreeMap<String, Value>,
        inst_params: Map<String, Value>,
        stage_inputs: &mut Option<(Vec<InputFile>, Option<UserError>)>,
    ) -> Result<Instance, UserError> {
        let file = self.file;
        let kind = self.registry.get(&decl.kind.value).expect("checked above");
        let name = instance_name(&decl.name.value, &coords);
        check_known_params(file, decl, kind.known_params(), &coords)?;
        let stage_of = |dep: &Located<String>| self.index[dep.value.as_str()];
        let deps: Vec<usize> = if aggregate {
            decl.deps
                .iter()
                .flat_map(|d| &self.by_stage[&stage_of(d)])
                .copied()
                .collect()
        } else {
            decl.deps
                .iter()
                .flat_map(|d| self.by_coords[&stage_of(d)].within(&coords))
                .collect()
        };
        if decl.kind.value == "cmd" {
            checks::dep_env_names(file, decl, &name, &deps, &self.instances)?;
        }
        let spec = kind_spec(file, decl, self.vars, &inst_params)?;
        kind.validate(&inst_params, &spec)
            .map_err(|msg| file.error_at(decl.name.mark, format!("stage `{name}`: {msg}")))?;
        if stage_inputs.is_none() {
            *stage_inputs = Some(inputs_of(file, self.root, decl, self.vars)?);
        }
        let (inputs, input_error) = stage_inputs.clone().expect("set above");
        Ok(Instance {
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
        })
    }
}
