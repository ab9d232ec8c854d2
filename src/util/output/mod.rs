//! Output files, one policy for every command. Every target of a run is validated and reserved
//! before any work starts: it is none of the run's inputs (the files it reads, every file in a
//! folder it reads, and — checked again when the output is written — every file the run opened
//! since), two spellings of one file are one target, and a regular file (or a name not taken
//! yet) gets a temp file beside it at once, so that a folder without write access or a name too
//! long fails before the work. The output is written to that temp file, flushed to disk and
//! renamed over the target, keeping a replaced file's mode: a full disk, an error or a signal
//! half-way leave the old file (or none) in place and no temp file behind. A character device or
//! a FIFO (`/dev/null`, `/dev/stdout`, a pipe) is written in place; a directory, block device or
//! socket is refused.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::io_words;
use crate::error::{Error, Result};
use crate::util::input::opened_files;

mod protected;

pub use protected::Protected;
use protected::{FileId, id_of, is_model_file};

/// Where a reserved output goes.
enum Sink {
    /// A temp file beside `real` (the target with links resolved), renamed over it at the end.
    Replace {
        tmp: PathBuf,
        file: File,
        real: PathBuf,
    },
    /// A character device or FIFO, opened for writing.
    InPlace(File),
}

struct Reserved {
    /// The option (`--out`, `--plot`, `--json`), for messages.
    what: String,
    /// The path as given, to find the reservation again.
    given: PathBuf,
    /// The resolved path, to tell two spellings of one file apart from two files.
    key: PathBuf,
    /// The existing file's identity (hard links).
    id: Option<FileId>,
    sink: Sink,
}

static RESERVED: Mutex<Vec<Reserved>> = Mutex::new(Vec::new());
/// The temp files that exist now, for the signal handler (see [`remove_temp_files`]).
static TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The folder a path's file lies in.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// What a target is now.
enum Found {
    /// A regular file: its resolved path and metadata.
    File(PathBuf, std::fs::Metadata),
    /// A character device or FIFO.
    Stream(PathBuf, std::fs::Metadata),
    /// Nothing yet: the resolved path it will have.
    New(PathBuf),
}

/// Validates `path` as a target of option `what` against `inputs` and what the run has opened.
fn inspect(path: &Path, what: &str, inputs: &Protected) -> Result<Found> {
    let refuse = |msg: String| Error::output(path, format!("{what}: {msg}"));
    let name = path
        .file_name()
        .ok_or_else(|| refuse("needs a file name".into()))?;
    check_name_length(path, what)?;
    let is_input = |id: FileId, real: &Path| {
        inputs.holds(id)
            || opened_files()
                .iter()
                .any(|(oid, opath)| *oid == id && opath == real)
    };
    match std::fs::metadata(path) {
        Ok(meta) => {
            let kind = meta.file_type();
            let real = std::fs::canonicalize(path).map_err(|e| refuse(io_words(&e)))?;
            if kind.is_file() {
                if is_input(id_of(&meta), &real) {
                    return Err(refuse(
                        "is one of this command's inputs: choose another file".into(),
                    ));
                }
                check_name_length(&real, what)?;
                Ok(Found::File(real, meta))
            } else if kind.is_char_device() || kind.is_fifo() {
                Ok(Found::Stream(real, meta))
            } else {
                let is = if kind.is_dir() {
                    "a directory"
                } else if kind.is_block_device() {
                    "a block device"
                } else {
                    "a socket"
                };
                Err(refuse(format!(
                    "exists and is {is}, not a regular file: hsdiff writes regular files (replaced whole), character devices and FIFOs"
                )))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(refuse(
                    "is a symbolic link to a file that does not exist: give the file itself".into(),
                ));
            }
            let dir = parent(path);
            let dir_meta = std::fs::metadata(dir)
                .ok()
                .filter(|m| m.is_dir())
                .ok_or_else(|| refuse(format!("the folder {} does not exist", dir.display())))?;
            if inputs.folders.contains(&id_of(&dir_meta)) {
                if is_model_file(name.as_bytes()) {
                    return Err(refuse(format!(
                        "would add a model file to {}, one of this command's inputs: choose another folder",
                        dir.display()
                    )));
                }
                if crate::util::glob::is_capture_name(name.as_bytes()) {
                    return Err(refuse(format!(
                        "would add a capture file to {}, one of this command's inputs, where a \
                         later run would read it as a sample: choose another folder",
                        dir.display()
                    )));
                }
            }
            let real = std::fs::canonicalize(dir)
                .map_err(|e| refuse(io_words(&e)))?
                .join(name);
            check_name_length(&real, what)?;
            Ok(Found::New(real))
        }
        Err(e) => Err(refuse(io_words(&e))),
    }
}

/// The longest file name the target's file system takes (`statvfs`), or 255.
fn name_max(dir: &Path) -> usize {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return 255;
    };
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path; `st` is written by the call before it is read.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return 255;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let n = unsafe { st.assume_init() }.f_namemax;
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(255)
}

fn check_name_length(real: &Path, what: &str) -> Result<()> {
    let len = real.file_name().map_or(0, |n| n.len());
    let max = name_max(parent(real));
    if len > max {
        return Err(Error::output(
            real,
            format!("{what}: the file name is {len} bytes; this file system takes at most {max}"),
        ));
    }
    Ok(())
}

/// The temp file's name beside `real`: `.NAME.hsdiff-PID-N.tmp`, NAME shortened (on a character
/// boundary when it is UTF-8) so that the whole fits the file system's name limit.
fn temp_name(real: &Path) -> PathBuf {
    let name = real.file_name().map(|n| n.as_bytes()).unwrap_or(b"output");
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let suffix = format!(".hsdiff-{}-{n}.tmp", std::process::id());
    let room = name_max(parent(real)).saturating_sub(suffix.len() + 1);
    let mut keep = name.len().min(room);
    if let Ok(text) = std::str::from_utf8(name) {
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
    }
    let mut tmp = b".".to_vec();
    tmp.extend_from_slice(&name[..keep]);
    tmp.extend_from_slice(suffix.as_bytes());
    parent(real).join(OsString::from_vec(tmp))
}

/// Opens a character device or FIFO for writing. A FIFO is opened without blocking, so that one
/// nobody reads is an error now rather than a hang.
fn open_stream(path: &Path, meta: &std::fs::Metadata, what: &str) -> Result<File> {
    let fifo = meta.file_type().is_fifo();
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(if fifo { libc::O_NONBLOCK } else { 0 })
        .open(path)
        .map_err(|e| {
            let why = if e.raw_os_error() == Some(libc::ENXIO) {
                "is a FIFO that no process reads: start the reader first".to_string()
            } else {
                format!("cannot open it for writing: {}", io_words(&e))
            };
            Error::output(path, format!("{what}: {why}"))
        })?;
    if fifo {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns; writes block again from here.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
    }
    Ok(file)
}

/// Validates and reserves every target of a run at once: `targets` are (path, option) pairs,
/// `inputs` the files and folders the run reads. Two targets naming one file are refused.
pub fn reserve_all(targets: &[(&Path, &str)], inputs: &[&Path]) -> Result<()> {
    let protected = Protected::of(inputs);
    for (path, what) in targets {
        reserve(path, what, &protected)?;
    }
    Ok(())
}

/// Validates and reserves one target (see the module's description).
pub fn reserve(path: &Path, what: &str, inputs: &Protected) -> Result<()> {
    let found = inspect(path, what, inputs)?;
    let (key, id) = match &found {
        Found::File(real, meta) | Found::Stream(real, meta) => (real.clone(), Some(id_of(meta))),
        Found::New(real) => (real.clone(), None),
    };
    let mut reserved = lock(&RESERVED);
    if let Some(other) = reserved
        .iter()
        .find(|r| r.key == key || (id.is_some() && r.id == id))
    {
        // A character device (`/dev/null`) can take several outputs; a file or a FIFO takes
        // one (two writers on one pipe would interleave their bytes).
        let is = match &found {
            Found::Stream(_, meta) if meta.file_type().is_char_device() => None,
            Found::Stream(..) => Some("FIFO"),
            _ => Some("file"),
        };
        if let Some(is) = is {
            return Err(Error::output(
                path,
                format!(
                    "{what} and {} name the same {is} ({}): give each its own",
                    other.what,
                    other.given.display()
                ),
            ));
        }
    }
    let sink = match found {
        Found::Stream(real, meta) => Sink::InPlace(open_stream(&real, &meta, what)?),
        Found::File(real, _) | Found::New(real) => {
            let tmp = temp_name(&real);
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| {
                    Error::output(
                        path,
                        format!(
                            "{what}: cannot create a file in {}: {}",
                            parent(&real).display(),
                            io_words(&e)
                        ),
                    )
                })?;
            lock(&TEMPS).push(tmp.clone());
            Sink::Replace { tmp, file, real }
        }
    };
    reserved.push(Reserved {
        what: what.to_string(),
        given: path.to_path_buf(),
        key,
        id,
        sink,
    });
    Ok(())
}

/// Takes the reservation of `path` (made now if there is none: library callers).
fn take(path: &Path) -> Result<Reserved> {
    let find = |list: &mut Vec<Reserved>| {
        list.iter()
            .position(|r| r.given == path)
            .map(|i| list.remove(i))
    };
    if let Some(r) = find(&mut lock(&RESERVED)) {
        return Ok(r);
    }
    reserve(path, "output", &Protected::default())?;
    find(&mut lock(&RESERVED))
        .ok_or_else(|| Error::Internal("an output reservation vanished".into()))
}

fn forget_temp(tmp: &Path) {
    lock(&TEMPS).retain(|t| t != tmp);
}

/// Writes `path`: `write` fills the open file it is given (the reserved temp file, or the
/// device); a temp file is then flushed to disk, given the replaced file's mode and renamed
/// over the target. On any error the temp file is removed and the target is untouched.
pub fn write_with(path: &Path, write: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
    // Nothing made from an input that changed while it was read is written.
    crate::util::mapped::check()?;
    let r = take(path)?;
    let cannot = |e: std::io::Error| Error::write(path, "cannot write", e);
    match r.sink {
        Sink::InPlace(mut file) => {
            write(&mut file)?;
            file.flush().map_err(cannot)
        }
        Sink::Replace {
            tmp,
            mut file,
            real,
        } => {
            let done = (|| {
                write(&mut file)?;
                file.flush().map_err(cannot)?;
                file.sync_all().map_err(cannot)?;
                // The target may have changed while the work ran, and the run may have opened
                // it since it was reserved (a model a fingerprint named): check again.
                match inspect(&real, &r.what, &Protected::default())? {
                    Found::File(_, meta) => {
                        let mode = meta.permissions().mode() & 0o7777;
                        file.set_permissions(std::fs::Permissions::from_mode(mode))
                            .map_err(cannot)?;
                    }
                    Found::New(_) => {}
                    Found::Stream(..) => {
                        return Err(Error::output(
                            path,
                            format!("{}: became a device or FIFO while hsdiff ran", r.what),
                        ));
                    }
                }
                drop(file);
                std::fs::rename(&tmp, &real).map_err(cannot)
            })();
            if done.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            forget_temp(&tmp);
            done
        }
    }
}

/// Writes `bytes` to `path` (see [`write_with`]).
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    write_with(path, |f| {
        f.write_all(bytes)
            .map_err(|e| Error::write(path, "cannot write", e))
    })
}

/// Drops every reservation not written (the command failed or did not need it): their temp
/// files are removed. The command line calls it before the process exits.
pub fn discard_reservations() {
    let list = std::mem::take(&mut *lock(&RESERVED));
    for r in list {
        if let Sink::Replace { tmp, .. } = r.sink {
            let _ = std::fs::remove_file(&tmp);
            forget_temp(&tmp);
        }
    }
}

/// Removes the temp files that exist now (on SIGINT, SIGTERM, SIGHUP).
fn remove_temp_files() {
    for tmp in lock(&TEMPS).drain(..) {
        let _ = std::fs::remove_file(tmp);
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP remove the temp files before the process dies of the
/// signal: the signals are blocked in this thread (call it first, before other threads start:
/// they inherit the mask) and waited for by a thread of their own, which cleans up, then
/// re-raises the signal with its default action. Child processes start with an empty mask.
pub fn clean_up_on_signals() {
    // SAFETY: plain libc calls on a local signal set; the set outlives each call.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(set.as_mut_ptr(), sig);
        }
        let set = set.assume_init();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("hsdiff-signals".into())
            .spawn(move || {
                let mut sig = 0;
                if libc::sigwait(&set, &mut sig) == 0 {
                    remove_temp_files();
                    libc::signal(sig, libc::SIG_DFL);
                    libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                    libc::raise(sig);
                }
            });
        if spawned.is_err() {
            // No thread to receive them: let the signals act as before.
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests;
