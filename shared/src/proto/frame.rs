//! Framing and encoding of the control-socket messages: the 4-byte length prefix with its
//! "more frames" bit, the frame and message limits, the version-first postcard encoding,
//! and the typed errors of a frame that does not read or decode (see the module doc of
//! [`super`]).

use super::{Request, RequestFrame, Response, ResponseFrame, PROTOCOL_VERSION};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Largest frame accepted, bytes (a message longer than this is split into frames).
pub const MAX_FRAME: usize = 1 << 20;
/// Largest message (request or response body, all its frames) accepted, bytes: 16 MiB.
/// At 2,000 services × 20,000 endpoints (`dataplane/tests/ctl_scale.rs`) the config's TOML
/// is 2.3 MB and `status --json` prints 6.6 MB (the postcard answer is smaller), so this
/// leaves several times that, while 64 connections cannot pin more than 1 GiB of buffers.
pub const MAX_MESSAGE: usize = 16 << 20;
/// Bit of the frame prefix that says more frames of the same message follow.
pub(super) const MORE_FRAMES: u32 = 1 << 31;

/// What was wrong with a request frame, in [`Response::BadFrame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BadFrameKind {
    /// The connection ended, or stalled past the daemon's frame deadline, inside a frame
    /// (length prefix or body). The daemon closes the connection after replying.
    Truncated,
    /// A frame's length is over [`MAX_FRAME`], or the message's over [`MAX_MESSAGE`]. The
    /// daemon closes the connection after replying (the rest of the stream cannot be framed).
    TooLarge,
    /// The frame's protocol version is not [`PROTOCOL_VERSION`]. The connection stays
    /// usable.
    Version,
    /// The body does not decode as a [`RequestFrame`]. The connection stays usable.
    Malformed,
}

impl BadFrameKind {
    /// Whether the connection can carry another frame after this one (the frame was read
    /// whole, only its content was wrong).
    pub fn keeps_connection(self) -> bool {
        matches!(self, BadFrameKind::Version | BadFrameKind::Malformed)
    }
}

/// Framing and decoding errors.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Socket error (including EOF mid-frame).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A frame's length prefix over [`MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the limit of {MAX_FRAME} bytes")]
    TooLarge(usize),
    /// A message's frames add up to more than [`MAX_MESSAGE`].
    #[error("message of {0} bytes or more exceeds the limit of {MAX_MESSAGE} bytes")]
    MessageTooLarge(usize),
    /// The reader's budget for buffered bytes (shared with other connections) refused the
    /// next frame ([`read_frame_within`]).
    #[error("the control socket is buffering too many large messages of other connections ({0} bytes more refused); try again")]
    Busy(usize),
    /// Peer speaks another protocol version.
    #[error("protocol version mismatch: peer speaks version {peer}, this side speaks version {PROTOCOL_VERSION}; use matching spillway and spillwayctl builds")]
    Version {
        /// The peer's version.
        peer: u16,
    },
    /// Body does not decode.
    #[error("malformed frame: {0}")]
    Decode(String),
}

/// Writes one message: `body` as frames of at most [`MAX_FRAME`] bytes, each but the last
/// with the [`MORE_FRAMES`] bit (an empty body is one empty frame). Errors: `MessageTooLarge`
/// for a body over [`MAX_MESSAGE`] (nothing is written), or the socket's error.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> Result<(), FrameError> {
    if body.len() > MAX_MESSAGE {
        return Err(FrameError::MessageTooLarge(body.len()));
    }
    let mut chunks = body.chunks(MAX_FRAME).peekable();
    if chunks.peek().is_none() {
        w.write_all(&0u32.to_be_bytes())?;
    }
    while let Some(c) = chunks.next() {
        let more = if chunks.peek().is_some() { MORE_FRAMES } else { 0 };
        w.write_all(&(c.len() as u32 | more).to_be_bytes())?;
        w.write_all(c)?;
    }
    w.flush()?;
    Ok(())
}

/// Reads one message (all its frames, see [`write_frame`]) and returns its body.
/// `Ok(None)` on a clean EOF before a message starts. Errors: `TooLarge` when a frame's
/// length exceeds [`MAX_FRAME`], `MessageTooLarge` when the message would exceed
/// [`MAX_MESSAGE`] (both checked before the frame is read), `Io(UnexpectedEof)` for an end
/// inside a message.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, FrameError> {
    read_frame_within(r, |_| true)
}

/// [`read_frame`] with a budget: `reserve(n)` is asked before each frame's `n` bytes are
/// buffered (after its length is checked) and may refuse ([`FrameError::Busy`]); the caller
/// returns what it reserved when it is done with the body. So many connections sending
/// large messages at once cannot make the daemon buffer more than its budget.
pub fn read_frame_within(r: &mut impl Read, mut reserve: impl FnMut(usize) -> bool) -> Result<Option<Vec<u8>>, FrameError> {
    let mut body = Vec::new();
    let mut first = true;
    loop {
        let mut prefix = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            let n = r.read(&mut prefix[got..])?;
            if n == 0 {
                if got == 0 && first {
                    return Ok(None);
                }
                return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            got += n;
        }
        first = false;
        let p = u32::from_be_bytes(prefix);
        let n = (p & !MORE_FRAMES) as usize;
        if n > MAX_FRAME {
            return Err(FrameError::TooLarge(n));
        }
        if body.len() + n > MAX_MESSAGE {
            return Err(FrameError::MessageTooLarge(body.len() + n));
        }
        if !reserve(n) {
            return Err(FrameError::Busy(n));
        }
        let start = body.len();
        body.resize(start + n, 0);
        r.read_exact(&mut body[start..])?;
        if p & MORE_FRAMES == 0 {
            return Ok(Some(body));
        }
    }
}

impl FrameError {
    /// The [`BadFrameKind`] to answer this error with; `None` for a socket error other than
    /// an end or stall inside a frame (nobody is left to answer).
    pub fn kind(&self) -> Option<BadFrameKind> {
        use std::io::ErrorKind as K;
        match self {
            FrameError::Io(e) if matches!(e.kind(), K::UnexpectedEof | K::TimedOut | K::WouldBlock) => Some(BadFrameKind::Truncated),
            FrameError::Io(_) => None,
            FrameError::TooLarge(_) | FrameError::MessageTooLarge(_) | FrameError::Busy(_) => Some(BadFrameKind::TooLarge),
            FrameError::Version { .. } => Some(BadFrameKind::Version),
            FrameError::Decode(_) => Some(BadFrameKind::Malformed),
        }
    }
}

/// Decodes the version prefix of a body, then the rest as `T` when the version matches.
fn decode_versioned<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, FrameError> {
    let (peer, _) = postcard::take_from_bytes::<u16>(body).map_err(|e| FrameError::Decode(e.to_string()))?;
    if peer != PROTOCOL_VERSION {
        return Err(FrameError::Version { peer });
    }
    postcard::from_bytes(body).map_err(|e| FrameError::Decode(e.to_string()))
}

/// Encodes a request frame body.
pub fn encode_request(request: &Request) -> Vec<u8> {
    postcard::to_stdvec(&RequestFrame { version: PROTOCOL_VERSION, request: request.clone() }).unwrap_or_default()
}

/// Decodes a request frame body (version checked first).
pub fn decode_request(body: &[u8]) -> Result<Request, FrameError> {
    decode_versioned::<RequestFrame>(body).map(|f| f.request)
}

/// Encodes a response frame body.
pub fn encode_response(response: &Response) -> Vec<u8> {
    postcard::to_stdvec(&ResponseFrame { version: PROTOCOL_VERSION, response: response.clone() }).unwrap_or_default()
}

/// Decodes a response frame body (version checked first).
pub fn decode_response(body: &[u8]) -> Result<Response, FrameError> {
    decode_versioned::<ResponseFrame>(body).map(|f| f.response)
}
