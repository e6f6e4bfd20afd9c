//! One export as the Collector's file exporter writes it (OTLP JSON, one line each): the resource attributes
//! and the samples per leaf function of its `samples` profile. The Collector may keep attribute keys and
//! values in the dictionary's string table (`keyStrindex`, `stringValueStrindex`).

use std::collections::BTreeMap;

use serde_json::Value;

pub struct Export {
    pub attributes: BTreeMap<String, String>,
    pub counts: BTreeMap<String, i64>,
}

fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        Value::Number(n) => n.as_i64().unwrap(),
        _ => 0,
    }
}

fn index(v: &Value, key: &str) -> usize {
    v.get(key).map_or(0, int) as usize
}

pub fn read(line: &str) -> Export {
    let doc: Value = serde_json::from_str(line).unwrap();
    let dict = &doc["dictionary"];
    let strings: Vec<String> = dict["stringTable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    let text = |v: &Value, plain: &str, strindex: &str| match v.get(plain) {
        Some(s) => s.as_str().map_or_else(|| s.to_string(), str::to_string),
        None => strings[index(v, strindex)].clone(),
    };
    let rp = &doc["resourceProfiles"][0];
    let mut attributes = BTreeMap::new();
    for kv in rp["resource"]["attributes"].as_array().unwrap() {
        let value = &kv["value"];
        let v = if value.get("intValue").is_some() {
            int(&value["intValue"]).to_string()
        } else {
            text(value, "stringValue", "stringValueStrindex")
        };
        attributes.insert(text(kv, "key", "keyStrindex"), v);
    }
    let mut counts = BTreeMap::new();
    for p in rp["scopeProfiles"][0]["profiles"].as_array().unwrap() {
        if strings[index(&p["sampleType"], "typeStrindex")] != "samples" {
            continue;
        }
        for s in p["samples"].as_array().into_iter().flatten() {
            let stack = &dict["stackTable"][index(s, "stackIndex")];
            let leaf = &dict["locationTable"][int(&stack["locationIndices"][0]) as usize];
            let f = &dict["functionTable"][index(&leaf["lines"][0], "functionIndex")];
            let name = strings[index(f, "nameStrindex")].clone();
            *counts.entry(name).or_insert(0) += int(&s["values"][0]);
        }
    }
    Export { attributes, counts }
}
