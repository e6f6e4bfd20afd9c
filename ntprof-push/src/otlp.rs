//! pprof to the OTLP profiles data model of `opentelemetry-proto` 0.33 (proto v1.10, `v1development`): one
//! dictionary shared by the request (strings, mappings, locations, functions, stacks, attributes; entry 0 of
//! each the zero value), and one `Profile` per pprof sample type, since an OTLP profile has a single one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::profiles::v1development as m;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::{PushError, Window, pprof};

/// Interning tables of the dictionary being built.
#[derive(Default)]
struct Dict {
    d: m::ProfilesDictionary,
    strings: HashMap<String, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attributes: HashMap<(i32, String, i64), i32>,
}

impl Dict {
    fn new() -> Dict {
        let mut d = Dict::default();
        d.string("");
        d.d.mapping_table.push(m::Mapping::default());
        d.d.location_table.push(m::Location::default());
        d.d.function_table.push(m::Function::default());
        d.d.link_table.push(m::Link::default());
        d.d.attribute_table.push(m::KeyValueAndUnit::default());
        d.d.stack_table.push(m::Stack::default());
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(m::Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, i);
        i
    }

    fn attribute(&mut self, key: i32, text: Option<String>, num: i64, unit: i32) -> i32 {
        let id = (
            key,
            text.clone().unwrap_or_default(),
            if text.is_some() { 0 } else { num },
        );
        if let Some(&i) = self.attributes.get(&id) {
            return i;
        }
        let value = match text {
            Some(s) => any_value::Value::StringValue(s),
            None => any_value::Value::IntValue(num),
        };
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(m::KeyValueAndUnit {
            key_strindex: key,
            value: Some(AnyValue { value: Some(value) }),
            unit_strindex: unit,
        });
        self.attributes.insert(id, i);
        i
    }
}

/// Looks up string `i` of the pprof table.
fn text(p: &pprof::Profile, i: i64) -> Result<&str, PushError> {
    usize::try_from(i)
        .ok()
        .and_then(|i| p.string_table.get(i))
        .map(String::as_str)
        .ok_or_else(|| PushError::Input(format!("pprof string index {i} is out of the table")))
}

fn string_value(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        key_strindex: 0,
    }
}

/// A profile id: 16 bytes, unique within a process (the window's start, the pid and a counter).
fn profile_id(start_ns: u64) -> Vec<u8> {
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    // Relaxed: the counter only has to differ between calls; nothing else is ordered by it.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) ^ (u64::from(std::process::id()) << 40);
    let mut id = start_ns.to_be_bytes().to_vec();
    id.extend_from_slice(&n.to_be_bytes());
    id
}

/// The OTLP export of one window: its pprof translated, the service name and labels as resource attributes
/// (`service.name` and the label keys as given).
pub fn export_request(w: &Window) -> Result<ExportProfilesServiceRequest, PushError> {
    w.check(true)?;
    let p = pprof::decode(&w.pprof)?;
    let mut d = Dict::new();
    let mut mappings = HashMap::new();
    for mp in &p.mapping {
        let filename_strindex = d.string(text(&p, mp.filename)?);
        mappings.insert(mp.id, d.d.mapping_table.len() as i32);
        d.d.mapping_table.push(m::Mapping {
            memory_start: mp.memory_start,
            memory_limit: mp.memory_limit,
            file_offset: mp.file_offset,
            filename_strindex,
            attribute_indices: vec![],
        });
    }
    let mut functions = HashMap::new();
    for f in &p.function {
        let func = m::Function {
            name_strindex: d.string(text(&p, f.name)?),
            system_name_strindex: d.string(text(&p, f.system_name)?),
            filename_strindex: d.string(text(&p, f.filename)?),
            start_line: f.start_line,
        };
        functions.insert(f.id, d.d.function_table.len() as i32);
        d.d.function_table.push(func);
    }
    let mut locations = HashMap::new();
    for l in &p.location {
        let mapping_index = match l.mapping_id {
            0 => 0,
            id => *mappings.get(&id).ok_or_else(|| {
                PushError::Input(format!("pprof location {} has unknown mapping {id}", l.id))
            })?,
        };
        let mut lines = Vec::with_capacity(l.line.len());
        for line in &l.line {
            let function_index = *functions.get(&line.function_id).ok_or_else(|| {
                PushError::Input(format!(
                    "pprof location {} has unknown function {}",
                    l.id, line.function_id
                ))
            })?;
            lines.push(m::Line {
                function_index,
                line: line.line,
                column: 0,
            });
        }
        locations.insert(l.id, d.d.location_table.len() as i32);
        d.d.location_table.push(m::Location {
            mapping_index,
            address: l.address,
            lines,
            attribute_indices: vec![],
        });
    }
    // Each pprof sample once: its stack and attributes, shared by the per-type profiles.
    let mut samples = Vec::with_capacity(p.sample.len());
    for s in &p.sample {
        if s.value.len() != p.sample_type.len() {
            return Err(PushError::Input(format!(
                "a pprof sample has {} values for {} sample types",
                s.value.len(),
                p.sample_type.len()
            )));
        }
        let mut stack = Vec::with_capacity(s.location_id.len());
        for id in &s.location_id {
            stack.push(*locations.get(id).ok_or_else(|| {
                PushError::Input(format!("pprof sample refers to unknown location {id}"))
            })?);
        }
        let mut attrs = Vec::with_capacity(s.label.len());
        for l in &s.label {
            let key = d.string(text(&p, l.key)?);
            let unit = d.string(text(&p, l.num_unit)?);
            let value = if l.str != 0 {
                Some(text(&p, l.str)?.to_string())
            } else {
                None
            };
            attrs.push(d.attribute(key, value, l.num, unit));
        }
        samples.push((d.stack(stack), attrs, &s.value));
    }
    let (start, end) = w.span_nanos();
    let period_type = match &p.period_type {
        Some(t) => Some(m::ValueType {
            type_strindex: d.string(text(&p, t.r#type)?),
            unit_strindex: d.string(text(&p, t.unit)?),
        }),
        None => None,
    };
    let mut profiles = Vec::with_capacity(p.sample_type.len());
    for (j, st) in p.sample_type.iter().enumerate() {
        let sample_type = m::ValueType {
            type_strindex: d.string(text(&p, st.r#type)?),
            unit_strindex: d.string(text(&p, st.unit)?),
        };
        profiles.push(m::Profile {
            sample_type: Some(sample_type),
            samples: samples
                .iter()
                .filter(|(_, _, v)| v[j] != 0)
                .map(|(stack, attrs, v)| m::Sample {
                    stack_index: *stack,
                    attribute_indices: attrs.clone(),
                    link_index: 0,
                    values: vec![v[j]],
                    timestamps_unix_nano: vec![],
                })
                .collect(),
            time_unix_nano: start,
            duration_nano: end - start,
            period_type,
            period: p.period,
            profile_id: profile_id(start),
            ..Default::default()
        });
    }
    let mut attributes = vec![string_value("service.name", &w.service)];
    attributes.extend(w.labels.iter().map(|(k, v)| string_value(k, v)));
    Ok(ExportProfilesServiceRequest {
        resource_profiles: vec![m::ResourceProfiles {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_profiles: vec![m::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "ntprof".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(d.d),
    })
}

/// An export answered with a partial success that rejected profiles is a refusal.
pub(crate) fn check_response(body: &[u8]) -> Result<(), PushError> {
    let resp = ExportProfilesServiceResponse::decode(body).map_err(|e| {
        PushError::Transport(format!(
            "the OTLP answer is not an ExportProfilesServiceResponse: {e}"
        ))
    })?;
    check_partial(&resp)
}

/// See [`check_response`].
pub(crate) fn check_partial(resp: &ExportProfilesServiceResponse) -> Result<(), PushError> {
    match &resp.partial_success {
        Some(ps) if ps.rejected_profiles > 0 => Err(PushError::Rejected {
            status: format!(
                "OTLP partial success, {} profiles rejected",
                ps.rejected_profiles
            ),
            body: ps.error_message.clone(),
            retryable: false,
        }),
        _ => Ok(()),
    }
}
