//! Each HTTP protocol's request as a fake backend reads it (path, query, headers, body), the OTLP translation
//! of a known pprof profile, and a refusal's answer in the error.

mod common;

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use common::fake::Fake;
use ntprof_push::pprof::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};
use ntprof_push::{Auth, Client, PushError, Target, Window, export_request};
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use prost::Message;

/// A pprof profile: main -> hot (3 samples) and main -> cold (1), two sample types, a pid label.
fn profile() -> Vec<u8> {
    let strings = [
        "",
        "samples",
        "count",
        "cpu",
        "nanoseconds",
        "main",
        "hot",
        "cold",
        "/bin/app",
        "pid",
        "app.c",
    ];
    let s = |x: &str| strings.iter().position(|y| *y == x).unwrap() as i64;
    let func = |id: u64, name: &str| Function {
        id,
        name: s(name),
        system_name: s(name),
        filename: s("app.c"),
        start_line: 1,
    };
    let loc = |id: u64, f: u64| Location {
        id,
        mapping_id: 1,
        address: 0x1000 + id,
        line: vec![Line {
            function_id: f,
            line: 10 + id as i64,
        }],
    };
    let sample = |leaf: u64, n: i64| Sample {
        location_id: vec![leaf, 1],
        value: vec![n, n * 1_000_000],
        label: vec![Label {
            key: s("pid"),
            str: 0,
            num: 42,
            num_unit: 0,
        }],
    };
    let p = Profile {
        sample_type: vec![
            ValueType {
                r#type: s("samples"),
                unit: s("count"),
            },
            ValueType {
                r#type: s("cpu"),
                unit: s("nanoseconds"),
            },
        ],
        sample: vec![sample(2, 3), sample(3, 1)],
        mapping: vec![Mapping {
            id: 1,
            memory_start: 0x1000,
            memory_limit: 0x2000,
            file_offset: 0,
            filename: s("/bin/app"),
        }],
        location: vec![loc(1, 1), loc(2, 2), loc(3, 3)],
        function: vec![func(1, "main"), func(2, "hot"), func(3, "cold")],
        string_table: strings.iter().map(|x| x.to_string()).collect(),
        time_nanos: 0,
        duration_nanos: 0,
        period_type: Some(ValueType {
            r#type: s("cpu"),
            unit: s("nanoseconds"),
        }),
        period: 1_000_000,
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &p.encode_to_vec()).unwrap();
    gz.finish().unwrap()
}

fn window() -> Window {
    Window {
        pprof: profile(),
        start: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250),
        end: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_001_500),
        service: "app".into(),
        labels: vec![("host".into(), "h1".into()), ("pid".into(), "42".into())],
    }
}

fn push(
    url: &str,
    respond: fn(&common::fake::Request) -> (u16, String),
) -> (Result<(), PushError>, common::fake::Request) {
    let fake = Fake::start(respond);
    let url = url.replace("PORT", &fake.port.to_string());
    let mut client = Client::new(
        Target::parse(&url)
            .unwrap()
            .with_auth(Auth::Bearer("s3cret".into())),
        Duration::from_secs(30),
    );
    let r = client.push(&window());
    (
        r,
        fake.requests
            .recv_timeout(Duration::from_secs(5))
            .expect("one request"),
    )
}

#[test]
fn pyroscope_ingest_names_the_app_and_labels_and_sends_the_pprof() {
    let (r, req) = push("pyroscope+http://127.0.0.1:PORT/pyro", |_| {
        (200, String::new())
    });
    r.unwrap();
    assert_eq!(req.method, "POST");
    assert_eq!(
        req.target,
        "/pyro/ingest?name=app%7Bhost%3Dh1%2Cpid%3D42%7D&from=1700000000&until=1700000002&format=pprof"
    );
    assert_eq!(req.header("authorization"), Some("Bearer s3cret"));
    assert_eq!(req.body, window().pprof);
}

#[test]
fn parca_rest_gateway_gets_writeraw_json_with_the_name_label() {
    let (r, req) = push("parca+http://u:p@127.0.0.1:PORT", |_| (200, "{}".into()));
    r.unwrap();
    assert_eq!(
        (req.method.as_str(), req.target.as_str()),
        ("POST", "/api/profiles/writeraw")
    );
    assert_eq!(req.header("content-type"), Some("application/json"));
    // with_auth replaced the URL's basic credentials.
    assert_eq!(req.header("authorization"), Some("Bearer s3cret"));
    let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    let labels: Vec<(String, String)> = body["series"][0]["labels"]["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("__name__", "process_cpu"),
        ("host", "h1"),
        ("pid", "42"),
        ("service_name", "app"),
    ];
    assert_eq!(labels, want.map(|(k, v)| (k.to_string(), v.to_string())));
    let raw = base64::engine::general_purpose::STANDARD
        .decode(
            body["series"][0]["samples"][0]["rawProfile"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(raw, window().pprof);
}

#[test]
fn otlp_http_posts_the_protobuf_export() {
    let (r, req) = push("otlp+http://127.0.0.1:PORT", |_| (200, String::new()));
    r.unwrap();
    assert_eq!(
        (req.method.as_str(), req.target.as_str()),
        ("POST", "/v1development/profiles")
    );
    assert_eq!(req.header("content-type"), Some("application/x-protobuf"));
    let got = ExportProfilesServiceRequest::decode(&req.body[..]).unwrap();
    // Profile ids differ per export; the rest is the translation.
    let mut want = export_request(&window()).unwrap();
    for (a, b) in got.resource_profiles[0].scope_profiles[0]
        .profiles
        .iter()
        .zip(&mut want.resource_profiles[0].scope_profiles[0].profiles)
    {
        b.profile_id = a.profile_id.clone();
    }
    assert_eq!(got, want);
}

#[test]
fn a_refusal_carries_the_status_and_the_backends_answer() {
    let (r, _) = push("pyroscope+http://127.0.0.1:PORT", |_| {
        (422, "profile type not supported".into())
    });
    let e = r.unwrap_err();
    assert_eq!(
        e.to_string(),
        "backend refused the profile: HTTP 422: profile type not supported"
    );
    assert!(!e.is_retryable());
    let (r, _) = push("otlp+http://127.0.0.1:PORT", |_| (503, "overloaded".into()));
    assert!(r.unwrap_err().is_retryable());
}

#[test]
fn labels_the_backends_cannot_take_are_refused_before_sending() {
    let mut w = window();
    w.labels.push(("bad key".into(), "x".into()));
    let mut c = Client::new(
        Target::parse("pyroscope+http://127.0.0.1:9").unwrap(),
        Duration::from_secs(1),
    );
    assert!(
        c.push(&w)
            .unwrap_err()
            .to_string()
            .contains("label key \"bad key\"")
    );
    w.labels.pop();
    w.labels.push(("cmd".into(), "a,b".into()));
    assert!(c.push(&w).unwrap_err().to_string().contains("cannot hold"));
    w.labels.pop();
    w.labels.push(("host".into(), "again".into()));
    assert!(c.push(&w).unwrap_err().to_string().contains("given twice"));
}

#[test]
fn the_otlp_translation_keeps_every_sample_stack_and_label() {
    let req = export_request(&window()).unwrap();
    let d = req.dictionary.as_ref().unwrap();
    let rp = &req.resource_profiles[0];
    let attrs: Vec<(String, String)> = rp
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                format!("{:?}", kv.value.as_ref().unwrap().value.as_ref().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        attrs[0],
        ("service.name".into(), "StringValue(\"app\")".into())
    );
    assert_eq!(attrs[1].0, "host");
    let profiles = &rp.scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 2, "one OTLP profile per pprof sample type");
    // Entry 0 of every table is the zero value.
    assert_eq!(d.string_table[0], "");
    assert!(d.stack_table[0].location_indices.is_empty() && d.location_table[0].lines.is_empty());
    let name = |i: i32| d.string_table[i as usize].as_str();
    let mut types = Vec::new();
    for p in profiles {
        let st = p.sample_type.as_ref().unwrap();
        types.push((name(st.type_strindex), name(st.unit_strindex)));
        assert_eq!(p.time_unix_nano, 1_700_000_000_250_000_000);
        assert_eq!(p.duration_nano, 1_250_000_000);
        assert_eq!(p.period, 1_000_000);
        let mut by_stack = Vec::new();
        for s in &p.samples {
            let frames: Vec<&str> = d.stack_table[s.stack_index as usize]
                .location_indices
                .iter()
                .map(|&l| {
                    name(
                        d.function_table
                            [d.location_table[l as usize].lines[0].function_index as usize]
                            .name_strindex,
                    )
                })
                .collect();
            let attr = &d.attribute_table[s.attribute_indices[0] as usize];
            assert_eq!(name(attr.key_strindex), "pid");
            by_stack.push((frames, s.values.clone()));
        }
        let scale = if name(st.type_strindex) == "cpu" {
            1_000_000
        } else {
            1
        };
        assert_eq!(
            by_stack,
            [
                (vec!["hot", "main"], vec![3 * scale]),
                (vec!["cold", "main"], vec![scale])
            ]
        );
    }
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    assert_eq!(d.mapping_table[1].memory_start, 0x1000);
    assert_eq!(name(d.mapping_table[1].filename_strindex), "/bin/app");
}

#[test]
fn a_profile_that_is_not_pprof_is_refused() {
    let mut w = window();
    w.pprof = b"not a profile".to_vec();
    assert!(matches!(export_request(&w), Err(PushError::Input(_))));
    w.pprof = vec![0x1f, 0x8b, 0, 0];
    assert!(
        export_request(&w)
            .unwrap_err()
            .to_string()
            .contains("gunzip")
    );
}
