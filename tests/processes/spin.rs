//! The target program `ffi/targets/spin.c`: a temporary directory, the build, a running copy and its sections.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// The target program.
// ---------------------------------------------------------------------------------------------------------

/// A directory under /tmp, mode 0755 (so that `nobody` can run what is built into it), removed on drop.
pub(crate) struct TempDir {
    pub(crate) path: PathBuf,
}

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "ntprofile-processes-{}-{tag}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).expect("create the temporary directory");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("chmod 0755 the temporary directory");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Build `ffi/targets/spin.c` into `dir` (non-PIE, text at [`SPIN_TEXT`]), mode 0755.
pub(crate) fn build_spin(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("ffi/targets/spin.c");
    let out = dir.join("spin");
    let result = Command::new("gcc")
        .args([
            "-O2",
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
            "-no-pie",
            // One copy of each hot function, in its own section, with no cold part split off elsewhere.
            "-fno-reorder-blocks-and-partition",
            &format!("-Wl,-Ttext-segment={SPIN_TEXT:#x}"),
            "-o",
        ])
        .arg(&out)
        .arg(&source)
        .output()
        .expect("run gcc");
    assert!(
        result.status.success(),
        "gcc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).expect("chmod spin");
    out
}

/// A running `spin`: its hot-function ranges, its stdin (the go byte) and stdout (the truth line).
pub(crate) struct Target {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: BufReader<ChildStdout>,
    pub(crate) ranges: HashMap<String, (u64, u64)>,
    pub(crate) reaped: bool,
}

pub(crate) fn parse_hex(text: &str) -> u64 {
    u64::from_str_radix(text.trim_start_matches("0x"), 16)
        .unwrap_or_else(|_| panic!("not a hex number: {text:?}"))
}

impl Target {
    /// Start `spin` with `args` and read its ranges up to its "ready" line.
    pub(crate) fn spawn(spin: &Path, args: &[&str]) -> Target {
        let mut child = Command::new(spin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn spin");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut target = Target {
            child,
            stdin,
            stdout,
            ranges: HashMap::new(),
            reaped: false,
        };
        loop {
            let mut line = String::new();
            let n = target.stdout.read_line(&mut line).expect("read spin");
            assert!(n > 0, "spin {args:?} ended before it was ready");
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["ready", ..] => break,
                ["range", name, start, stop, entry] => {
                    let (start, stop, entry) =
                        (parse_hex(start), parse_hex(stop), parse_hex(entry));
                    assert!(
                        start <= entry && entry < stop && stop - start < 4096,
                        "{name}: entry {entry:#x} and section [{start:#x}, {stop:#x})"
                    );
                    target.ranges.insert(name.to_string(), (start, stop));
                }
                _ => panic!("unexpected line from spin: {line:?}"),
            }
        }
        target
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn range(&self, name: &str) -> (u64, u64) {
        self.ranges[name]
    }

    /// Let the target start working.
    pub(crate) fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(b"g").expect("write the go byte");
        stdin.flush().expect("flush the go byte");
    }

    /// Wait for the end; the fields of its "truth" line.
    pub(crate) fn finish(&mut self) -> HashMap<String, u64> {
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).expect("read spin");
        let exit = self.child.wait().expect("wait for spin");
        self.reaped = true;
        assert!(exit.success(), "spin failed: {exit:?}, output {rest:?}");
        let line = rest
            .lines()
            .find(|l| l.starts_with("truth "))
            .unwrap_or_else(|| panic!("no truth line in {rest:?}"));
        line.split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.parse().expect("a number")))
            .collect()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The smallest range covering `names`.
pub(crate) fn span(target: &Target, names: &[&str]) -> (u64, u64) {
    let start = names
        .iter()
        .map(|n| target.range(n).0)
        .min()
        .expect("names");
    let stop = names
        .iter()
        .map(|n| target.range(n).1)
        .max()
        .expect("names");
    (start, stop)
}
