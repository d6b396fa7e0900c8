//! Reading a kernel BTF file safely: bounded in size, checked before it is parsed.
use std::{
    io::Read as _,
    path::{Path, PathBuf},
};

use thiserror::Error;

/// The running kernel's BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The largest BTF file read (a distribution kernel's vmlinux BTF is about 5-7 MiB).
pub const MAX_BTF_BYTES: u64 = 64 << 20;

/// The magic number at the start of every BTF blob (little-endian on x86_64).
const BTF_MAGIC: u16 = 0xeb9f;
/// Size of the fixed part of the BTF header.
const HEADER_LEN: usize = 24;

/// Why a BTF file could not be read.
#[derive(Debug, Error)]
pub enum BtfFileError {
    /// The file does not exist.
    #[error("no BTF file at {0}")]
    Missing(PathBuf),
    /// Opening or reading failed.
    #[error("cannot read BTF file {0}: {1}")]
    Unreadable(PathBuf, std::io::Error),
    /// The file is empty.
    #[error("BTF file {0} is empty")]
    Empty(PathBuf),
    /// The file does not start with the BTF magic number.
    #[error(
        "{0} is not a BTF file (no BTF magic number; a kernel's BTF is /sys/kernel/btf/vmlinux)"
    )]
    NotBtf(PathBuf),
    /// The file is larger than [`MAX_BTF_BYTES`].
    #[error("BTF file {0} is larger than {max} MiB", max = MAX_BTF_BYTES >> 20)]
    TooLarge(PathBuf),
    /// The header's section sizes do not fit the file.
    #[error("BTF file {0} is truncated or corrupt ({1})")]
    Corrupt(PathBuf, String),
}

/// Reads a BTF file: at most [`MAX_BTF_BYTES`], and only if it starts like BTF (so a device
/// such as /dev/zero is refused after its first bytes) and its header fits its size.
pub fn read(path: &Path) -> Result<Vec<u8>, BtfFileError> {
    read_at_most(path, MAX_BTF_BYTES)
}

fn read_at_most(path: &Path, max: u64) -> Result<Vec<u8>, BtfFileError> {
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => BtfFileError::Missing(path.to_path_buf()),
        _ => BtfFileError::Unreadable(path.to_path_buf(), e),
    })?;
    let mut bytes = Vec::new();
    let mut reader = file.take(HEADER_LEN as u64);
    reader
        .read_to_end(&mut bytes)
        .map_err(|e| BtfFileError::Unreadable(path.to_path_buf(), e))?;
    if bytes.is_empty() {
        return Err(BtfFileError::Empty(path.to_path_buf()));
    }
    if bytes.len() < 2 || u16::from_le_bytes([bytes[0], bytes[1]]) != BTF_MAGIC {
        return Err(BtfFileError::NotBtf(path.to_path_buf()));
    }
    let mut reader = reader.into_inner().take(max + 1 - bytes.len() as u64);
    reader
        .read_to_end(&mut bytes)
        .map_err(|e| BtfFileError::Unreadable(path.to_path_buf(), e))?;
    if bytes.len() as u64 > max {
        return Err(BtfFileError::TooLarge(path.to_path_buf()));
    }
    check_header(&bytes).map_err(|why| BtfFileError::Corrupt(path.to_path_buf(), why))?;
    Ok(bytes)
}

/// Checks that the header is complete and its type and string sections lie inside the blob.
fn check_header(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < HEADER_LEN {
        return Err(format!("{} bytes, shorter than a BTF header", bytes.len()));
    }
    let u32_at =
        |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let hdr_len = u64::from(u32_at(4));
    let end = |off: usize, len: usize| hdr_len + u64::from(u32_at(off)) + u64::from(u32_at(len));
    let size = bytes.len() as u64;
    if hdr_len < HEADER_LEN as u64 || end(8, 12) > size || end(16, 20) > size {
        return Err("its header's sections reach past the end of the file".into());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn write(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, bytes).expect("write");
        f
    }

    /// A minimal, valid BTF blob: one `int` type.
    pub(crate) fn tiny_btf() -> Vec<u8> {
        let strings = b"\0int\0";
        let mut types = Vec::new();
        types.extend_from_slice(&1u32.to_le_bytes()); // name_off: "int"
        types.extend_from_slice(&(1u32 << 24).to_le_bytes()); // kind INT, vlen 0
        types.extend_from_slice(&4u32.to_le_bytes()); // size
        types.extend_from_slice(&((1u32 << 24) | 32).to_le_bytes()); // signed, 32 bits
        let mut b = Vec::new();
        b.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]); // version, flags
        b.extend_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes()); // type_off
        b.extend_from_slice(&(types.len() as u32).to_le_bytes());
        b.extend_from_slice(&(types.len() as u32).to_le_bytes()); // str_off
        b.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        b.extend_from_slice(&types);
        b.extend_from_slice(strings);
        b
    }

    #[test]
    fn a_valid_blob_is_read_whole() {
        let blob = tiny_btf();
        let f = write(&blob);
        assert_eq!(read(f.path()).expect("valid"), blob);
    }

    #[test]
    fn missing_empty_and_foreign_files_are_named_errors() {
        let missing = read(Path::new("/nonexistent/dropscope-btf"));
        assert!(
            matches!(missing, Err(BtfFileError::Missing(_))),
            "{missing:?}"
        );
        let empty = write(b"");
        assert!(matches!(read(empty.path()), Err(BtfFileError::Empty(_))));
        let text = write(b"this is not BTF at all, but long enough for a header");
        assert!(matches!(read(text.path()), Err(BtfFileError::NotBtf(_))));
        assert!(matches!(
            read(Path::new("/dev/zero")),
            Err(BtfFileError::NotBtf(_))
        ));
        assert!(matches!(
            read(Path::new("/tmp")),
            Err(BtfFileError::Unreadable(..))
        ));
    }

    #[test]
    fn reading_stops_at_the_limit() {
        let mut blob = tiny_btf();
        blob.resize(4096, 0);
        let f = write(&blob);
        assert!(matches!(
            read_at_most(f.path(), 1000),
            Err(BtfFileError::TooLarge(_))
        ));
        assert!(read_at_most(f.path(), 4096).is_ok());
    }

    #[test]
    fn a_truncated_blob_is_corrupt() {
        let blob = tiny_btf();
        let f = write(&blob[..blob.len() - 3]);
        assert!(matches!(read(f.path()), Err(BtfFileError::Corrupt(..))));
        let f = write(&blob[..10]);
        assert!(matches!(read(f.path()), Err(BtfFileError::Corrupt(..))));
    }

    #[test]
    fn this_kernels_btf_reads() {
        // The machines this project supports have kernel BTF (see the README).
        let bytes = read(Path::new(KERNEL_BTF)).expect("kernel BTF");
        assert!(bytes.len() > 1 << 20);
    }
}
