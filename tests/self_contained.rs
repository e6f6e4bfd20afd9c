//! The repository stands on its own: no file in it points outside it (a relative path climbing into a sibling
//! directory, an absolute path of the machine it was written on), and every relative Markdown link in the README
//! and `docs/` names a file inside the repository.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every text file of the repository, skipping build outputs and version control.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".git") {
                text_files(&path, out);
            }
        } else if [
            "rs", "md", "h", "c", "toml", "map", "in", "sh", "txt", "yml", "json",
        ]
        .iter()
        .any(|ext| name.ends_with(&format!(".{ext}")))
            || name == "run"
        {
            out.push(path);
        }
    }
}

#[test]
fn no_file_points_outside_the_repository() {
    let mut files = Vec::new();
    text_files(&repo(), &mut files);
    assert!(files.len() > 20, "found only {} files", files.len());
    // Spelled in two halves so that this file does not match itself.
    let forbidden = [format!("../{}", "shared"), format!("/{}/", "work")];
    let mut hits = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for f in &forbidden {
                if line.contains(f.as_str()) {
                    hits.push(format!(
                        "{}:{}: {}",
                        file.strip_prefix(repo()).unwrap().display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "files point outside the repository:\n{}",
        hits.join("\n")
    );
}

/// Relative link targets of `[text](target)` in a Markdown text, without their `#anchor`.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        if !target.contains("://") && !target.starts_with('#') && !target.starts_with("mailto:") {
            let path = target.split('#').next().unwrap_or("");
            if !path.is_empty() && !path.contains(' ') {
                links.push(path.to_string());
            }
        }
    }
    links
}

#[test]
fn markdown_links_resolve_inside_the_repository() {
    let mut docs = vec![repo().join("README.md")];
    for entry in std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .flatten()
    {
        docs.push(entry.path());
    }
    for must in ["api.md", "linux-mapping.md"] {
        assert!(
            docs.iter().any(|d| d.ends_with(must)),
            "docs/{must} is missing"
        );
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for must in ["docs/api.md", "docs/linux-mapping.md"] {
        assert!(
            readme.contains(&format!("]({must})")),
            "README does not link {must}"
        );
    }
    let mut broken = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        let dir = doc.parent().unwrap();
        for link in relative_links(&text) {
            let target = dir.join(&link);
            let inside = target
                .canonicalize()
                .map(|t| t.starts_with(repo().canonicalize().unwrap()))
                .unwrap_or(false);
            if !inside {
                broken.push(format!("{}: {link}", doc.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken or outside links:\n{}",
        broken.join("\n")
    );
}

#[test]
fn header_and_crate_docs_name_the_docs() {
    let header = std::fs::read_to_string(repo().join("include/ntprofile.h")).unwrap();
    let lib = std::fs::read_to_string(repo().join("src/lib.rs")).unwrap();
    for must in ["docs/api.md", "docs/linux-mapping.md"] {
        assert!(
            header.contains(must),
            "include/ntprofile.h does not name {must}"
        );
        assert!(lib.contains(must), "the crate docs do not name {must}");
    }
}
