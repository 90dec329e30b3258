//! What making one 4 KiB O_DIRECT write durable costs on this machine, two ways: a write
//! followed by an fdatasync (what the log does), or one write on a file opened with O_DSYNC
//! (no separate fdatasync op). Both through glommio's io_uring, off the IOPOLL ring (files
//! opened write-only, as `DmaDisk` does), onto preallocated zeroed blocks (as segments are).
//!
//! ```sh
//! cargo run --release -p storage --example sync_cost -- DIR fdatasync|dsync WRITES [FILES]
//! ```
//!
//! FILES files (default 1) are written by one task each, at once; WRITES in all. Prints wall
//! time, this process's CPU (its io_uring workers included) and the whole machine's busy time
//! per write (/proc/stat; noisy on a shared machine: run the two modes alternately), and
//! voluntary context switches per write.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

const BLOCK: usize = 4096;

#[path = "../benches/common/machine_cpu.rs"]
mod machine_cpu;

/// (CPU seconds of this process, voluntary context switches).
fn self_usage() -> (f64, i64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF covers every thread.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime) + secs(ru.ru_stime), ru.ru_nvcsw)
}

fn prepare(path: &Path, blocks: usize) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = blocks * BLOCK;
    while left > 0 {
        let n = left.min(zeros.len());
        f.write_all(&zeros[..n])?;
        left -= n;
    }
    f.sync_all()?;
    // Touch nothing else: the file's blocks are allocated and written, as a segment's are.
    f.write_all_at(&[], 0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: sync_cost DIR fdatasync|dsync WRITES [FILES]";
    let (Some(dir), Some(mode), Some(writes)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let dsync = match mode.as_str() {
        "fdatasync" => false,
        "dsync" => true,
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let writes: usize = writes.parse().unwrap_or(0);
    let files: usize = args.get(4).and_then(|f| f.parse().ok()).unwrap_or(1).max(1);
    let per_file = writes.div_ceil(files).max(1);
    let paths: Vec<PathBuf> =
        (0..files).map(|i| Path::new(dir).join(format!("sync-cost-{i}.dat"))).collect();
    for p in &paths {
        if let Err(e) = prepare(p, per_file) {
            eprintln!("preparing {}: {e}", p.display());
            std::process::exit(1);
        }
    }
    let paths2 = paths.clone();
    let result = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        .spawn(move || async move {
            let mut handles = Vec::new();
            let mut opened = Vec::new();
            for p in &paths2 {
                let mut o = glommio::io::OpenOptions::new();
                o.write(true);
                if dsync {
                    o.custom_flags(libc::O_DSYNC);
                }
                match o.dma_open(p).await {
                    Ok(f) => opened.push(Rc::new(f)),
                    Err(e) => return Err(format!("open {}: {e}", p.display())),
                }
            }
            let b0 = machine_cpu::busy_ticks();
            let (c0, v0) = self_usage();
            let t0 = Instant::now();
            for f in &opened {
                let f = f.clone();
                handles.push(glommio::spawn_local(async move {
                    for n in 0..per_file {
                        let mut buf = f.alloc_dma_buffer(BLOCK);
                        buf.as_bytes_mut().fill(1 + u8::try_from(n % 200).unwrap_or(0));
                        f.write_at(buf, (n * BLOCK) as u64).await.map_err(|e| e.to_string())?;
                        if !dsync {
                            f.fdatasync().await.map_err(|e| e.to_string())?;
                        }
                    }
                    Ok::<(), String>(())
                }));
            }
            for h in handles {
                h.await?;
            }
            let wall = t0.elapsed().as_secs_f64();
            let (c1, v1) = self_usage();
            let b1 = machine_cpu::busy_ticks();
            for f in opened {
                if let Ok(f) = Rc::try_unwrap(f) {
                    let _ = f.close().await;
                }
            }
            Ok((wall, c1 - c0, (b1 - b0) as f64 / machine_cpu::ticks_per_second(), v1 - v0))
        })
        .map_err(|e| e.to_string())
        .and_then(|h| h.join().map_err(|e| e.to_string()));
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    match result {
        Ok(Ok((wall, cpu, machine, vcsw))) => {
            let n = (per_file * files) as f64;
            println!(
                "{mode} files={files} writes={} wall/write={:.1}us process_cpu/write={:.1}us machine_cpu/write={:.1}us vcsw/write={:.2}",
                per_file * files,
                wall * 1e6 / n,
                cpu * 1e6 / n,
                machine * 1e6 / n,
                vcsw as f64 / n
            );
        }
        Ok(Err(e)) | Err(e) => {
            eprintln!("sync_cost: {e}");
            std::process::exit(1);
        }
    }
}
