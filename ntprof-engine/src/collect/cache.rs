//! The opened objects of a run kept from one report to the next: a run cut into windows (`--every`) builds a
//! report per window, and each would otherwise read every symbol table and DWARF again. An object is opened
//! again only when the file at its path changed (another device, inode, size or modification time: a build
//! replaced it), so a window never names code with a stale table. A mapped object is the very file its
//! process mapped ([`ObjectFile`], held open and checked): it is opened once.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::files::ObjectFile;
use crate::options::Debuginfod;
use crate::symbols::ElfSymbolizer;
use crate::symbols::debuginfod::Client;

/// An object to open: a path on the host, or the checked file of a mapping.
#[derive(Clone, Copy, Debug)]
pub enum ToOpen<'a> {
    /// A path on the host.
    Path(&'a str),
    /// The file a process mapped.
    Object(&'a Arc<ObjectFile>),
}

impl ToOpen<'_> {
    /// The key of its symbolizer.
    pub fn key(&self) -> String {
        match self {
            ToOpen::Path(p) => p.to_string(),
            ToOpen::Object(o) => o.key(),
        }
    }

    fn identity(&self) -> Option<Identity> {
        match self {
            ToOpen::Path(p) => identity(p),
            ToOpen::Object(o) => Some((o.id.0, o.id.1, 0, 0)),
        }
    }

    fn open(&self, debuginfod: Option<&Client>) -> Opened {
        match self {
            ToOpen::Path(p) => ElfSymbolizer::open_with(Path::new(p), debuginfod).map(Arc::new),
            ToOpen::Object(o) => ElfSymbolizer::open_object(o, debuginfod).map(Arc::new),
        }
    }
}

/// What tells one file at a path from another: device, inode, size, modification time (ns).
type Identity = (u64, u64, u64, i128);

/// An object opened (or refused, with why).
pub type Opened = Result<Arc<ElfSymbolizer>, String>;

/// Objects opened by path, kept across reports, and the run's debuginfod client (each build-id fetched once).
#[derive(Default)]
pub struct SymbolCache {
    objects: Mutex<HashMap<String, (Option<Identity>, Opened)>>,
    debuginfod: Option<Client>,
}

impl std::fmt::Debug for SymbolCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SymbolCache({} objects)", self.len())
    }
}

fn identity(path: &str) -> Option<Identity> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    Some((m.dev(), m.ino(), m.size(), mtime))
}

impl SymbolCache {
    /// An empty cache whose objects without a debug file on disk ask `debuginfod`'s servers for one.
    pub fn new(debuginfod: Option<Debuginfod>) -> SymbolCache {
        SymbolCache {
            objects: Mutex::default(),
            debuginfod: debuginfod.map(Client::new),
        }
    }

    /// The objects `paths`, each opened once while its file stays the same (in parallel: loading DWARF is
    /// most of the cost), by key.
    pub fn open_all(&self, targets: &[ToOpen<'_>]) -> Vec<(String, Opened)> {
        let keys: Vec<String> = targets.iter().map(ToOpen::key).collect();
        let paths: Vec<&str> = keys.iter().map(String::as_str).collect();
        let ids: Vec<Option<Identity>> = targets.iter().map(ToOpen::identity).collect();
        let mut found: Vec<Option<Opened>> = {
            let objects = self.lock();
            paths
                .iter()
                .zip(&ids)
                .map(|(p, id)| match objects.get(*p) {
                    Some((was, opened)) if id.is_some() && was == id => Some(opened.clone()),
                    _ => None,
                })
                .collect()
        };
        let missing: Vec<usize> = (0..paths.len()).filter(|&i| found[i].is_none()).collect();
        let opened: Vec<(usize, Opened)> = std::thread::scope(|scope| {
            let handles: Vec<_> = missing
                .iter()
                .map(|&i| {
                    let t = targets[i];
                    let client = self.debuginfod.as_ref();
                    scope.spawn(move || (i, t.open(client)))
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let mut objects = self.lock();
        for (i, o) in opened {
            objects.insert(paths[i].to_string(), (ids[i], o.clone()));
            found[i] = Some(o);
        }
        paths
            .iter()
            .zip(found)
            .filter_map(|(p, o)| Some((p.to_string(), o?)))
            .collect()
    }

    /// How many objects are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<Identity>, Opened)>> {
        // A panic while the map was held cannot leave it half-changed (each change is one insert).
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }
}
