//! Where debug files are fetched by build-id over HTTP (debuginfod): the servers, the limits and the cache,
//! read from the environment as elfutils' client reads it, so that ntprof, gdb and perf share one cache.

use std::path::PathBuf;
use std::time::Duration;

/// elfutils' default `DEBUGINFOD_TIMEOUT`, in seconds: a server that has not sent 100 KiB of a file by then
/// is given up.
pub const DEFAULT_TIMEOUT_S: u64 = 90;
/// How much of a file a server must have sent within the timeout (elfutils' 100 K).
pub const PROGRESS_BYTES: u64 = 100 << 10;
/// The largest debug file fetched when `DEBUGINFOD_MAXSIZE` does not say (elfutils then has no limit; a
/// hostile server could fill the disk): the debug files of the largest programs (a browser's) are a few GiB.
pub const DEFAULT_MAX_SIZE: u64 = 4 << 30;
/// The most redirects followed for one file (a server redirecting in a loop is given up after them).
pub const MAX_REDIRECTS: u32 = 8;

/// The debuginfod client's settings.
///
/// ```
/// use ntprof_engine::options::Debuginfod;
///
/// let d = Debuginfod::with_urls(vec!["http://127.0.0.1:8002".into()]);
/// assert_eq!(d.urls, ["http://127.0.0.1:8002"]);
/// assert!(d.cache.ends_with("debuginfod_client") || std::env::var_os("DEBUGINFOD_CACHE_PATH").is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Debuginfod {
    /// The servers, asked in this order (`DEBUGINFOD_URLS`, space-separated).
    pub urls: Vec<String>,
    /// A server that has not sent [`PROGRESS_BYTES`] of a file within this time is given up, and so is one
    /// silent this long at any moment (`DEBUGINFOD_TIMEOUT`, seconds; default 90; `None`: 0 or negative).
    pub timeout: Option<Duration>,
    /// The longest one file's download may take (`DEBUGINFOD_MAXTIME`, seconds; `None`: no limit).
    pub max_time: Option<Duration>,
    /// The largest file downloaded, in bytes (`DEBUGINFOD_MAXSIZE`; default [`DEFAULT_MAX_SIZE`]).
    pub max_size: u64,
    /// The cache: `DEBUGINFOD_CACHE_PATH`, else `$XDG_CACHE_HOME/debuginfod_client`, else
    /// `~/.cache/debuginfod_client`; a file is kept as `CACHE/BUILDID/debuginfo`.
    pub cache: PathBuf,
    /// Say on standard error what a fetch that lasts waits for.
    pub progress: bool,
}

impl Debuginfod {
    /// The settings the environment gives when `DEBUGINFOD_URLS` names at least one server; `None` (no
    /// fetching) otherwise.
    pub fn from_env() -> Option<Debuginfod> {
        let urls = std::env::var("DEBUGINFOD_URLS").ok()?;
        let urls: Vec<String> = urls.split_whitespace().map(str::to_string).collect();
        (!urls.is_empty()).then(|| Debuginfod::with_urls(urls))
    }

    /// The servers `urls`, with the limits and the cache from the environment.
    pub fn with_urls(urls: Vec<String>) -> Debuginfod {
        let seconds = |name: &str| -> Option<i64> { std::env::var(name).ok()?.trim().parse().ok() };
        let positive = |s: Option<i64>| s.filter(|&s| s > 0).map(|s| Duration::from_secs(s as u64));
        let timeout = match seconds("DEBUGINFOD_TIMEOUT") {
            None => Some(Duration::from_secs(DEFAULT_TIMEOUT_S)),
            s => positive(s),
        };
        let max_size = match seconds("DEBUGINFOD_MAXSIZE") {
            Some(n) if n > 0 => n as u64,
            _ => DEFAULT_MAX_SIZE,
        };
        Debuginfod {
            urls,
            timeout,
            max_time: positive(seconds("DEBUGINFOD_MAXTIME")),
            max_size,
            cache: cache_dir(),
            progress: true,
        }
    }
}

/// elfutils' cache directory.
fn cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(path) = var("DEBUGINFOD_CACHE_PATH") {
        return PathBuf::from(path);
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return PathBuf::from(xdg).join("debuginfod_client");
    }
    let home = var("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
    // The directory of elfutils before 0.177, used only where it exists (as elfutils does).
    let old = home.join(".debuginfod_client_cache");
    if old.is_dir() {
        return old;
    }
    home.join(".cache").join("debuginfod_client")
}
