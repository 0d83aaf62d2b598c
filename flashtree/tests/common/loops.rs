//! Loop devices over files (`losetup`), for tests of stores on raw block
//! devices. They need root; without it (or without `losetup`), `make`
//! returns why, and the caller prints it as the reason it skips.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop device, detached when dropped.
pub struct LoopDevice {
    pub path: PathBuf,
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

/// `count` loop devices of `bytes` each over files in `dir`, or why not.
pub fn make(dir: &Path, count: usize, bytes: u64) -> Result<Vec<LoopDevice>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("loop devices need root (losetup); not root".into());
    }
    let mut devices = Vec::new();
    for i in 0..count {
        let file = dir.join(format!("loop{i}.img"));
        std::fs::File::create(&file)
            .and_then(|f| f.set_len(bytes))
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&file)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup --find --show {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        let device = LoopDevice { path };
        // A container may attach a loop device without giving it a node.
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&device.path)
            .map_err(|e| format!("{} attached but not usable: {e}", device.path.display()))?;
        devices.push(device);
    }
    Ok(devices)
}
