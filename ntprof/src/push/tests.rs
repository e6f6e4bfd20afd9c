//! The checks `Pushers::start` makes before a run: each mistake is refused with what to do instead.

use super::*;

fn args(urls: &[&str]) -> PushArgs {
    PushArgs {
        push: urls.iter().map(|u| u.to_string()).collect(),
        ..PushArgs::default()
    }
}

#[test]
fn no_push_is_none_and_push_options_alone_are_refused() {
    assert!(
        Pushers::start(&PushArgs::default(), &[], None)
            .unwrap()
            .is_none()
    );
    let a = PushArgs {
        name: Some("svc".into()),
        ..PushArgs::default()
    };
    let e = Pushers::start(&a, &[], None).err().unwrap();
    assert!(e.contains("go with --push"), "{e}");
}

#[test]
fn bad_urls_credentials_and_names_are_refused_before_the_run() {
    let cmd = vec!["/bin/true".to_string()];
    let e = Pushers::start(&args(&["http://h:1"]), &cmd, None)
        .err()
        .unwrap();
    assert!(e.contains("unknown scheme"), "{e}");
    let mut a = args(&["parca+grpc://u:pw@127.0.0.1:7070"]);
    a.push_token = Some("t".into());
    let e = Pushers::start(&a, &cmd, None).err().unwrap();
    assert!(e.contains("give them once") && !e.contains("pw"), "{e}");
    let mut a = args(&["otlp+grpc://127.0.0.1:4317"]);
    a.push_token_file = Some("/nonexistent/token".into());
    let e = Pushers::start(&a, &cmd, None).err().unwrap();
    assert!(e.contains("--push-token-file /nonexistent/token"), "{e}");
    let mut a = args(&["pyroscope+http://127.0.0.1:4040"]);
    a.name = Some("a{b}".into());
    let e = Pushers::start(&a, &cmd, None).err().unwrap();
    assert!(e.contains("Pyroscope names"), "{e}");
    let mut a = args(&["parca+http://127.0.0.1:7070"]);
    a.push_user = Some("nocolon".into());
    let e = Pushers::start(&a, &cmd, None).err().unwrap();
    assert!(e.contains("USER:PASSWORD"), "{e}");
}

#[test]
fn labels_are_the_defaults_then_the_users() {
    let mut a = args(&["parca+grpc://127.0.0.1:1"]);
    a.labels = vec![("team".into(), "x".into()), ("host".into(), "h2".into())];
    let cmd = vec!["/usr/bin/prog".to_string(), "arg".to_string()];
    let p = Pushers::start(&a, &cmd, None).unwrap().unwrap();
    assert_eq!(p.service, "prog");
    let keys: Vec<&str> = p.labels.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["host", "pid", "command_line", "team"]);
    assert_eq!(p.labels[0].1, "h2");
    assert_eq!(p.labels[2].1, "/usr/bin/prog arg");
    let s = p.finish();
    assert_eq!(s.targets.len(), 1);
    assert_eq!(s.targets[0].1.submitted, 0);
}
