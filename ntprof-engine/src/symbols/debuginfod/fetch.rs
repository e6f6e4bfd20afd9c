//! One download from one debuginfod server, bounded whatever the server does: connecting, the response's
//! headers and every read wait at most the timeout; the file must have sent 100 KiB by the timeout (elfutils'
//! rule), must start as an ELF file, may not be larger than the size cap (a larger `Content-Length` is refused
//! before reading, a longer body is cut off), and at most [`MAX_REDIRECTS`] redirects are followed. The body
//! is written to a file as it arrives, in blocks of [`BLOCK`] bytes: memory stays bounded whatever its size.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use crate::options::{Debuginfod, MAX_REDIRECTS, PROGRESS_BYTES};

/// The size of a read from the server.
pub const BLOCK: usize = 64 << 10;

/// Why a server gave no file.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed {
    /// It has no file for the build-id (404): nothing wrong.
    NotFound,
    /// Anything else, said for the report's notes.
    Other(String),
}

/// An HTTP client with the limits of `opts`.
pub fn agent(opts: &Debuginfod) -> ureq::Agent {
    ureq::Agent::config_builder()
        // The status is read: a 404 is an answer, not an error.
        .http_status_as_error(false)
        .max_redirects(MAX_REDIRECTS)
        .timeout_connect(opts.timeout)
        .timeout_send_request(opts.timeout)
        .timeout_recv_response(opts.timeout)
        // A server silent this long in the middle of the body is given up too.
        .timeout_per_read(opts.timeout)
        .timeout_global(opts.max_time)
        .user_agent(concat!("ntprof/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// Download `url` into the new file `out`; the bytes written.
pub fn download(
    agent: &ureq::Agent,
    opts: &Debuginfod,
    url: &str,
    out: &Path,
) -> Result<u64, Failed> {
    let started = Instant::now();
    let response = agent.get(url).call().map_err(|e| match e {
        ureq::Error::TooManyRedirects => Failed::Other(format!(
            "it redirected more than {MAX_REDIRECTS} times (a redirect loop?)"
        )),
        ureq::Error::Timeout(t) => Failed::Other(format!("no answer in time ({t})")),
        e => Failed::Other(format!("{e}")),
    })?;
    let status = response.status().as_u16();
    if status == 404 {
        return Err(Failed::NotFound);
    }
    if status != 200 {
        return Err(Failed::Other(format!("it answered HTTP status {status}")));
    }
    let body = response.into_body();
    if let Some(n) = body.content_length().filter(|&n| n > opts.max_size) {
        return Err(Failed::Other(format!(
            "its file is {n} bytes, more than the {} bytes fetched (DEBUGINFOD_MAXSIZE)",
            opts.max_size
        )));
    }
    let mut reader = body.into_reader();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .map_err(|e| Failed::Other(format!("cannot write {}: {e}", out.display())))?;
    let mut block = vec![0u8; BLOCK];
    let mut total: u64 = 0;
    loop {
        let n = match reader.read(&mut block) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Failed::Other(format!(
                    "the download failed after {total} bytes: {e}"
                )));
            }
        };
        let head = total < 4;
        total += n as u64;
        if head && total >= 4 && !is_elf_start(&block[..n], total) {
            return Err(Failed::Other(
                "it answered something that is not an ELF file".into(),
            ));
        }
        if total > opts.max_size {
            return Err(Failed::Other(format!(
                "it sent more than the {} bytes fetched (DEBUGINFOD_MAXSIZE); the rest was not read",
                opts.max_size
            )));
        }
        if let Some(t) = opts.timeout
            && total < PROGRESS_BYTES
            && started.elapsed() > t
        {
            return Err(Failed::Other(format!(
                "it sent {total} bytes in {} s, less than 100 KiB (DEBUGINFOD_TIMEOUT)",
                t.as_secs()
            )));
        }
        file.write_all(&block[..n])
            .map_err(|e| Failed::Other(format!("cannot write {}: {e}", out.display())))?;
    }
    if total < 4 {
        return Err(Failed::Other(format!(
            "it answered {total} bytes, not an ELF file"
        )));
    }
    file.sync_all()
        .map_err(|e| Failed::Other(format!("cannot write {}: {e}", out.display())))?;
    Ok(total)
}

/// Whether the first block read (of `total` bytes so far, at least 4) starts with the ELF magic. A first read
/// shorter than 4 bytes is let through here; the file is checked as ELF once whole.
fn is_elf_start(block: &[u8], total: u64) -> bool {
    total != block.len() as u64 || block.starts_with(b"\x7fELF")
}
