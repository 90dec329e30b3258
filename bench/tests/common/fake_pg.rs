//! A fake PostgreSQL server that speaks just enough of the protocol for a client to connect
//! and prepare statements (every statement has one text parameter and returns no columns),
//! then misbehaves at the first Execute.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// What the server does at the first Execute of a connection.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Never answer anything again (the socket stays open).
    StallOnExecute,
    /// Close the socket.
    CloseOnExecute,
}

/// Listens on a free loopback port, serving every connection on its own thread; returns the port.
pub fn spawn_fake_server(mode: Mode) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream, mode));
        }
    });
    port
}

fn read_exact(s: &mut TcpStream, n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).ok()?;
    Some(buf)
}

fn len_of(bytes: &[u8]) -> usize {
    let n = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    usize::try_from(n).unwrap()
}

/// One client: startup, then answer Parse/Describe/Sync; at the first Execute, stall or close.
fn serve(mut s: TcpStream, mode: Mode) -> Option<()> {
    let len = len_of(&read_exact(&mut s, 4)?);
    read_exact(&mut s, len - 4)?; // startup message (protocol version and parameters)
    // AuthenticationOk, ReadyForQuery(idle).
    s.write_all(b"R\0\0\0\x08\0\0\0\0Z\0\0\0\x05I").ok()?;
    let mut stalled = false;
    loop {
        let head = read_exact(&mut s, 5)?;
        read_exact(&mut s, len_of(&head[1..]) - 4)?;
        if stalled {
            continue;
        }
        match head[0] {
            b'P' => s.write_all(b"1\0\0\0\x04").ok()?, // ParseComplete
            // ParameterDescription: one parameter of type text (oid 25); then NoData.
            b'D' => s.write_all(b"t\0\0\0\x0a\0\x01\0\0\0\x19n\0\0\0\x04").ok()?,
            b'E' => match mode {
                Mode::StallOnExecute => stalled = true,
                Mode::CloseOnExecute => return None,
            },
            b'S' => s.write_all(b"Z\0\0\0\x05I").ok()?,
            b'X' => return Some(()),
            _ => {}
        }
    }
}
