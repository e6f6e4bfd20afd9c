//! debuginfod: the debug file of an object that has none on disk, fetched by its build-id from the servers of
//! `DEBUGINFOD_URLS` (`URL/buildid/BUILDID/debuginfo`) and kept in elfutils' cache (`CACHE/BUILDID/debuginfo`,
//! see [`Debuginfod`]), where a later run, gdb and perf find it.
//!
//! Each build-id is looked up once per run (the objects of a run are opened in parallel, so different
//! build-ids are fetched at the same time; a second object of the same build-id waits for the first's answer).
//! A file is used, and kept in the cache, only when it is an ELF file of the very build-id asked for: a server
//! that answers another build's file, garbage, too much or nothing in time names nothing and costs bounded
//! time and memory (see `fetch`). A file already in the cache is used on the same condition. Servers are asked
//! in their order; the first with the file wins.

mod fetch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use object::{Object, ReadCache};

pub use self::fetch::BLOCK;
use self::fetch::Failed;
use super::symtab::hex;
use crate::files::{self, Budgeted, Owners};
use crate::options::Debuginfod;

/// How long a fetch runs before it is said on standard error (with [`Debuginfod::progress`]).
const SAY_AFTER: Duration = Duration::from_secs(1);

/// Where a debug file came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The file in the cache.
    pub path: PathBuf,
    /// Fetched in this run (else found in the cache).
    pub fetched: bool,
}

/// A lookup's answer: the file, or why there is none (every server's answer).
pub type Answer = Result<Found, String>;

/// The debuginfod client of one run.
pub struct Client {
    opts: Debuginfod,
    agent: ureq::Agent,
    /// Each build-id's answer, computed once.
    answers: Mutex<HashMap<String, Arc<OnceLock<Answer>>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("opts", &self.opts).finish()
    }
}

/// Names temporary files apart within this process.
static TEMP: AtomicU64 = AtomicU64::new(0);

impl Client {
    /// A client with the settings `opts`.
    pub fn new(opts: Debuginfod) -> Client {
        Client {
            agent: fetch::agent(&opts),
            opts,
            answers: Mutex::default(),
        }
    }

    /// The settings.
    pub fn options(&self) -> &Debuginfod {
        &self.opts
    }

    /// The debug file of build-id `id` (for the object `object`, named in what is said): from the cache, else
    /// from the servers; the same answer for every later call of this run.
    pub fn debug_file(&self, id: &[u8], object: &Path) -> Answer {
        let key = hex(id);
        let cell = {
            let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
            answers.entry(key.clone()).or_default().clone()
        };
        cell.get_or_init(|| self.look_up(id, &key, object)).clone()
    }

    fn look_up(&self, id: &[u8], key: &str, object: &Path) -> Answer {
        let dir = self.opts.cache.join(key);
        let cached = dir.join("debuginfo");
        if cached.is_file() && check(&cached, id).is_ok() {
            return Ok(Found {
                path: cached,
                fetched: false,
            });
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(&dir)
            .map_err(|e| format!("cannot create the cache {}: {e}", dir.display()))?;
        let mut why = Vec::new();
        for url in &self.opts.urls {
            let url = format!("{}/buildid/{key}/debuginfo", url.trim_end_matches('/'));
            let temp = dir.join(format!(
                ".debuginfo.ntprof-{}-{}",
                std::process::id(),
                TEMP.fetch_add(1, Ordering::Relaxed) // A counter: no other memory depends on it.
            ));
            let got = self.said_if_long(&url, object, || {
                fetch::download(&self.agent, &self.opts, &url, &temp)
            });
            let checked = got.and_then(|_| check(&temp, id).map_err(Failed::Other));
            match checked {
                Ok(()) => {
                    std::fs::rename(&temp, &cached).map_err(|e| {
                        let _ = std::fs::remove_file(&temp);
                        format!("cannot keep {} in the cache: {e}", cached.display())
                    })?;
                    return Ok(Found {
                        path: cached,
                        fetched: true,
                    });
                }
                Err(f) => {
                    let _ = std::fs::remove_file(&temp);
                    why.push(match f {
                        Failed::NotFound => format!("{url}: not found"),
                        Failed::Other(e) => format!("{url}: {e}"),
                    });
                }
            }
        }
        // An empty directory left by a failed fetch: nothing of it is kept.
        let _ = std::fs::remove_dir(&dir);
        Err(format!(
            "debuginfod has no debug file for build-id {key}: {}",
            why.join("; ")
        ))
    }

    /// Run `fetch`, saying on standard error what it waits for once it has lasted [`SAY_AFTER`].
    fn said_if_long<T>(&self, url: &str, object: &Path, fetch: impl FnOnce() -> T) -> T {
        if !self.opts.progress {
            return fetch();
        }
        std::thread::scope(|scope| {
            let (done, wait) = std::sync::mpsc::channel::<()>();
            scope.spawn(move || {
                if wait.recv_timeout(SAY_AFTER) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                    let limit = self
                        .opts
                        .timeout
                        .map_or(String::new(), |t| format!(", up to {} s", t.as_secs()));
                    eprintln!(
                        "ntprof: waiting for debuginfod: the debug file of {} from {url}{limit} \
                         (--no-debuginfod: none)",
                        object.display()
                    );
                }
            });
            let r = fetch();
            drop(done);
            r
        })
    }
}

/// `Ok` when `path` is an ELF file of build-id `id`; else why it is not used.
fn check(path: &Path, id: &[u8]) -> Result<(), String> {
    let (handle, len) = files::open(path, &Owners::Of(Vec::new()))?;
    let cache = ReadCache::new(Budgeted::new(handle, len));
    let file = object::File::parse(&cache)
        .map_err(|e| format!("it answered something that is not an ELF file ({e})"))?;
    match file.build_id() {
        Ok(Some(found)) if found == id => Ok(()),
        Ok(Some(found)) => Err(format!(
            "it answered the debug file of another build (build-id {}); not used",
            hex(found)
        )),
        _ => Err("it answered a file without a build-id; not used".into()),
    }
}
