//! A fake HTTP/1.1 backend on 127.0.0.1: it hands every request it reads to the test, and answers what the
//! test's responder says, once the test lets it (a slow backend is one held back by the test).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

/// One request as the fake read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query.
    pub target: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

type Responder = Arc<dyn Fn(&Request) -> (u16, String) + Send + Sync>;

pub struct Fake {
    pub port: u16,
    /// Every request read, in order.
    pub requests: Receiver<Request>,
}

impl Fake {
    /// A backend answering every request with `respond`'s status and body.
    pub fn start(respond: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static) -> Fake {
        Self::start_gated(respond, None)
    }

    /// A backend on a listener the test bound.
    pub fn from_listener(
        listener: TcpListener,
        respond: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static,
    ) -> Fake {
        Self::serve_on(listener, respond, None)
    }

    /// Like [`Fake::start`], but each answer waits for a message on the returned sender (dropping it releases
    /// every answer).
    pub fn start_slow(
        respond: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static,
    ) -> (Fake, Sender<()>) {
        let (tx, rx) = channel();
        (Self::start_gated(respond, Some(rx)), tx)
    }

    fn start_gated(
        respond: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static,
        gate: Option<Receiver<()>>,
    ) -> Fake {
        Self::serve_on(
            TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"),
            respond,
            gate,
        )
    }

    fn serve_on(
        listener: TcpListener,
        respond: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static,
        gate: Option<Receiver<()>>,
    ) -> Fake {
        let port = listener.local_addr().unwrap().port();
        let (tx, requests) = channel();
        let gate = Arc::new(Mutex::new(gate));
        let respond: Responder = Arc::new(respond);
        let g = Arc::clone(&gate);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (tx, respond, g) = (tx.clone(), Arc::clone(&respond), Arc::clone(&g));
                std::thread::spawn(move || serve(conn, &tx, &*respond, &g));
            }
        });
        Fake { port, requests }
    }
}

fn serve(
    conn: TcpStream,
    tx: &Sender<Request>,
    respond: &(dyn Fn(&Request) -> (u16, String) + Send + Sync),
    gate: &Mutex<Option<Receiver<()>>>,
) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let req = Request {
            method,
            target,
            headers,
            body,
        };
        let (status, answer) = respond(&req);
        let _ = tx.send(req);
        // The slow backend: hold the answer until the test lets it go. The lock is held while waiting so
        // that answers leave in the order their requests came.
        {
            let g = gate.lock().unwrap();
            if let Some(rx) = g.as_ref() {
                let _ = rx.recv();
            }
        }
        let reply = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{answer}",
            answer.len()
        );
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
