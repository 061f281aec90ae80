//! A Unix stream registered for read readiness only, so that the peer reading what was written
//! does not wake this side.
//!
//! A Unix socket tells its writer "there is room again" each time the peer reads a message,
//! and tokio registers every stream for both directions: each answer the bridge wrote woke the
//! bridge again when the front read it, and each request woke the front when the bridge read it
//! — a thread switch for nothing per message and side (`perf sched timehist` showed them; with
//! one caller at a time, going without them saved 7 % of a call's CPU). Here a write is simply
//! tried; only when the socket's buffer is full is the stream registered for write readiness
//! too, until a write goes through again.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream as StdStream;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// The stream; split it with `tokio::io::split` for concurrent halves.
#[derive(Debug)]
pub struct QuietStream {
    /// Always `Some` between calls (taken only while the registration changes).
    io: Option<AsyncFd<StdStream>>,
    /// Whether write readiness is registered (a write found the buffer full).
    writable: bool,
    /// The task waiting to read: a new registration forgets the old one's wakers.
    reader: Option<Waker>,
}

impl QuietStream {
    /// Takes over `stream` (from here on, its readiness comes from this registration).
    pub fn new(stream: tokio::net::UnixStream) -> io::Result<QuietStream> {
        let std = stream.into_std()?;
        // The benchmark's switch: registered for both directions for good, as tokio registers.
        let plain = cfg!(feature = "bench-plain-sockets");
        let interest = if plain { Interest::READABLE.add(Interest::WRITABLE) } else { Interest::READABLE };
        Ok(QuietStream { io: Some(registered(std, interest)?), writable: plain, reader: None })
    }

    fn fd(&self) -> io::Result<&AsyncFd<StdStream>> {
        self.io.as_ref().ok_or_else(|| io::Error::other("the stream lost its registration"))
    }

    /// Registers the stream again, with write readiness or without; a waiting reader is woken
    /// to poll the new registration.
    fn register(&mut self, writable: bool) -> io::Result<()> {
        let std = self.io.take().ok_or_else(|| io::Error::other("the stream lost its registration"))?.into_inner();
        let interest = if writable { Interest::READABLE.add(Interest::WRITABLE) } else { Interest::READABLE };
        self.io = Some(registered(std, interest)?);
        self.writable = writable;
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
        Ok(())
    }
}

/// `stream` registered with the reactor for `interest`.
#[allow(unsafe_code)]
fn registered(stream: StdStream, interest: Interest) -> io::Result<AsyncFd<StdStream>> {
    // SAFETY: the stream owns its descriptor, and the `AsyncFd` owns the stream until
    // `into_inner` hands it back: the descriptor stays open and the same while registered.
    unsafe { AsyncFd::register_with_interest(stream, interest) }.map_err(io::Error::from)
}

impl AsyncRead for QuietStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let fd = this.fd()?;
            let mut guard = match fd.poll_read_ready(cx) {
                Poll::Ready(guard) => guard?,
                Poll::Pending => {
                    this.reader = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            };
            let unfilled = buf.initialize_unfilled();
            let room = unfilled.len();
            match guard.try_io(|inner| inner.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    // A read that did not fill the buffer emptied the socket (tokio's own
                    // streams rely on the same): the next read waits for the next readiness
                    // rather than trying the socket and finding it empty, a system call per
                    // message. Data arriving meanwhile is a new readiness, which this does not
                    // clear; nor does it clear the peer's close.
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for QuietStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match this.fd()?.get_ref().write(data) {
                Ok(n) => {
                    if this.writable && !cfg!(feature = "bench-plain-sockets") {
                        this.register(false)?;
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !this.writable {
                        // Registered with the buffer full: the readiness comes when it drains.
                        this.register(true)?;
                        continue;
                    }
                    let mut guard = ready!(this.fd()?.poll_write_ready(cx))?;
                    guard.clear_ready();
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.fd()?.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A write far larger than the socket's buffer goes through while the peer reads slowly
    /// (write readiness is registered and dropped again), and reads work before and after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_larger_than_the_buffer_waits_for_room_and_reads_go_on() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (mut a, mut b) = (QuietStream::new(a).unwrap(), QuietStream::new(b).unwrap());
        b.write_all(b"ping\n").await.unwrap();
        let mut ping = [0u8; 5];
        a.read_exact(&mut ping).await.unwrap();
        assert_eq!(&ping, b"ping\n");
        let big: Vec<u8> = (0..8 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let expected = big.clone();
        let writer = tokio::spawn(async move {
            a.write_all(&big).await.unwrap();
            assert!(!a.writable, "write readiness is dropped once a write goes through");
            a
        });
        let mut got = vec![0u8; expected.len()];
        let mut at = 0;
        while at < got.len() {
            let n = b.read(&mut got[at..(at + 4096).min(expected.len())]).await.unwrap();
            assert!(n > 0);
            at += n;
            if at % (1 << 20) < 4096 {
                tokio::task::yield_now().await;
            }
        }
        assert!(got == expected);
        let mut a = writer.await.unwrap();
        b.write_all(b"pong\n").await.unwrap();
        let mut pong = [0u8; 5];
        a.read_exact(&mut pong).await.unwrap();
        assert_eq!(&pong, b"pong\n");
    }

    /// A read that does not fill its buffer clears the readiness: the next read still wakes
    /// for data written later, and for the peer's close, whether the close came before the
    /// next read or after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_a_short_read_later_data_and_the_close_still_wake_the_reader() {
        let bound = std::time::Duration::from_secs(10);
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (mut a, mut b) = (QuietStream::new(a).unwrap(), QuietStream::new(b).unwrap());
        let mut buf = [0u8; 64];
        b.write_all(b"one").await.unwrap();
        assert_eq!(a.read(&mut buf).await.unwrap(), 3, "a short read");
        let writer = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            b.write_all(b"two").await.unwrap();
            b
        });
        let n = tokio::time::timeout(bound, a.read(&mut buf)).await.expect("later data wakes the reader").unwrap();
        assert_eq!(&buf[..n], b"two");
        let mut b = writer.await.unwrap();
        // The close right after a message: the short read, then the end at once.
        b.write_all(b"three").await.unwrap();
        b.shutdown().await.unwrap();
        let n = tokio::time::timeout(bound, a.read(&mut buf)).await.expect("the message").unwrap();
        assert_eq!(&buf[..n], b"three");
        let end = tokio::time::timeout(bound, a.read(&mut buf)).await.expect("the close is not lost").unwrap();
        assert_eq!(end, 0);
        // And a close that comes while the reader waits, after a short read.
        let (c, d) = tokio::net::UnixStream::pair().unwrap();
        let (mut c, mut d) = (QuietStream::new(c).unwrap(), QuietStream::new(d).unwrap());
        d.write_all(b"four").await.unwrap();
        assert_eq!(c.read(&mut buf).await.unwrap(), 4);
        let closer = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            drop(d);
        });
        let end = tokio::time::timeout(bound, c.read(&mut buf)).await.expect("the close wakes the reader").unwrap();
        assert_eq!(end, 0);
        closer.await.unwrap();
    }

    /// A reader parked while the writer changes the registration is woken (its waker lived in
    /// the old one).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_parked_reader_survives_a_change_of_registration() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (a, b) = (QuietStream::new(a).unwrap(), QuietStream::new(b).unwrap());
        let (mut a_read, mut a_write) = tokio::io::split(a);
        let (mut b_read, mut b_write) = tokio::io::split(b);
        let reading = tokio::spawn(async move {
            let mut line = [0u8; 4];
            a_read.read_exact(&mut line).await.unwrap();
            line
        });
        // Fills the socket (b does not read), so a's writer registers for write readiness.
        let big = vec![7u8; 4 * 1024 * 1024];
        let filling = tokio::spawn(async move {
            a_write.write_all(&big).await.unwrap();
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        b_write.write_all(b"done").await.unwrap();
        let line = tokio::time::timeout(std::time::Duration::from_secs(10), reading).await.expect("the reader woke");
        assert_eq!(&line.unwrap(), b"done");
        let mut sink = vec![0u8; 4 * 1024 * 1024];
        b_read.read_exact(&mut sink).await.unwrap();
        filling.await.unwrap();
    }
}
