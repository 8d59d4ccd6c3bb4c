//! Re-reads configuration files when they change, without a restart: the TLS certificate,
//! key and client CA, the API keys and the identities file. Files are polled (metadata
//! only) every [`RELOAD_POLL_INTERVAL`]; a file whose modification time, size or inode
//! changed is re-read. A new file that does not parse is refused with a warning and the
//! previous configuration stays in force.

use crate::metrics::Metrics;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How often the watched files' metadata is read. A rotated certificate is served within
/// this (cert-manager renews days before expiry; Kubernetes itself takes up to a minute to
/// update a mounted Secret), and a few `stat`s every 2 s cost nothing.
pub(crate) const RELOAD_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Re-reads a group of files and puts what they say in force, or says why not.
pub(crate) type Reload = Box<dyn Fn() -> Result<String, String> + Send + Sync>;

/// Files re-read together when any of them changes (a certificate with its key).
pub(crate) struct WatchedFiles {
    /// What the files are, for logs and the `config_reloads` metric: `tls`, `api_keys`,
    /// `identities`.
    pub name: &'static str,
    pub paths: Vec<PathBuf>,
    /// Answers a short summary of what is now in force, or why the new files were refused.
    pub reload: Reload,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Watcher")
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for WatchedFiles {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WatchedFiles")
            .field("name", &self.name)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

/// What tells one version of a file from the next. An atomic replace (a rename, or
/// Kubernetes swapping a Secret's `..data` symlink) gives a new inode even when time and
/// size match; a missing file is a state of its own, so its return is a change too.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint(Option<(SystemTime, u64, u64, u64)>);

impl Fingerprint {
    fn of(path: &std::path::Path) -> Fingerprint {
        // `metadata` follows symlinks: the file as a reader would open it.
        Fingerprint(std::fs::metadata(path).ok().map(|metadata| {
            (
                metadata.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                metadata.len(),
                metadata.ino(),
                metadata.dev(),
            )
        }))
    }
}

/// The watched files and the state they were last seen in.
pub(crate) struct Watcher {
    groups: Arc<Vec<WatchedFiles>>,
    seen: Vec<Vec<Fingerprint>>,
}

fn fingerprints(groups: &[WatchedFiles]) -> Vec<Vec<Fingerprint>> {
    groups
        .iter()
        .map(|group| {
            group
                .paths
                .iter()
                .map(|path| Fingerprint::of(path))
                .collect()
        })
        .collect()
}

impl Watcher {
    /// Takes the files' state now as the baseline: call it just after the files were read
    /// at start-up, so a change made while the server starts is not missed.
    pub(crate) fn new(groups: Vec<WatchedFiles>) -> Watcher {
        let seen = fingerprints(&groups);
        Watcher {
            groups: Arc::new(groups),
            seen,
        }
    }

    /// Watches in a task of `tasks` until it is aborted; no task when there is nothing to
    /// watch.
    pub(crate) fn spawn_in(self, metrics: Arc<Metrics>, tasks: &mut tokio::task::JoinSet<()>) {
        if !self.groups.is_empty() {
            tasks.spawn(self.run(metrics, RELOAD_POLL_INTERVAL));
        }
    }

    async fn run(mut self, metrics: Arc<Metrics>, every: Duration) {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let (groups, previous) = (self.groups.clone(), self.seen.clone());
            let metrics = metrics.clone();
            // stat and parse block (briefly): off the async runtime.
            let checked = tokio::task::spawn_blocking(move || {
                let now = fingerprints(&groups);
                for ((group, before), after) in groups.iter().zip(&previous).zip(&now) {
                    if before != after {
                        reload(group, &metrics);
                    }
                }
                now
            })
            .await;
            match checked {
                Ok(now) => self.seen = now,
                // A reload panicked: the configuration in force stays; the next tick tries
                // again.
                Err(error) => tracing::warn!(%error, "configuration reload failed"),
            }
        }
    }
}

fn reload(group: &WatchedFiles, metrics: &Metrics) {
    let paths: Vec<String> = group
        .paths
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    match (group.reload)() {
        Ok(summary) => {
            tracing::info!(file = group.name, ?paths, %summary, "configuration reloaded");
            metrics.config_reload(group.name, true);
        }
        Err(reason) => {
            tracing::warn!(
                file = group.name,
                ?paths,
                %reason,
                "changed configuration refused; the previous one stays in force"
            );
            metrics.config_reload(group.name, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_changed_file_is_reloaded_once_and_an_unchanged_one_never() {
        let dir = tempfile::tempdir().unwrap();
        let (changing, still) = (dir.path().join("changing"), dir.path().join("still"));
        std::fs::write(&changing, "one").unwrap();
        std::fs::write(&still, "one").unwrap();
        let counts = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
        let groups = [&changing, &still]
            .iter()
            .zip(&counts)
            .map(|(path, count)| {
                let count = count.clone();
                WatchedFiles {
                    name: "test",
                    paths: vec![path.to_path_buf()],
                    reload: Box::new(move || {
                        count.fetch_add(1, Ordering::SeqCst);
                        Ok(String::new())
                    }),
                }
            })
            .collect();
        let metrics = Metrics::new();
        let watcher = Watcher::new(groups);
        let task = tokio::spawn(watcher.run(metrics.clone(), Duration::from_millis(20)));
        // Replaced whole (a new inode), as an atomic writer or Kubernetes does.
        let replacement = dir.path().join("replacement");
        std::fs::write(&replacement, "two").unwrap();
        std::fs::rename(&replacement, &changing).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while counts[0].load(Ordering::SeqCst) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never reloaded");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A few more polls: the same version is not reloaded twice.
        tokio::time::sleep(Duration::from_millis(100)).await;
        task.abort();
        assert_eq!(counts[0].load(Ordering::SeqCst), 1);
        assert_eq!(counts[1].load(Ordering::SeqCst), 0);
        assert!(metrics
            .encode()
            .contains(r#"config_reloads_total{file="test",outcome="applied"} 1"#));
    }

    #[tokio::test]
    async fn a_kubernetes_secret_update_is_seen_through_its_symlinks_even_with_equal_content() {
        // A mounted Secret: tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>; an update
        // writes a new timestamped folder and swaps ..data in one rename.
        let dir = tempfile::tempdir().unwrap();
        let version = |name: &str| {
            let folder = dir.path().join(name);
            std::fs::create_dir(&folder).unwrap();
            std::fs::write(folder.join("tls.crt"), "same bytes").unwrap();
        };
        version("..2026_01_01");
        std::os::unix::fs::symlink("..2026_01_01", dir.path().join("..data")).unwrap();
        let mounted = dir.path().join("tls.crt");
        std::os::unix::fs::symlink("..data/tls.crt", &mounted).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let counted = count.clone();
        let watcher = Watcher::new(vec![WatchedFiles {
            name: "tls",
            paths: vec![mounted],
            reload: Box::new(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(String::new())
            }),
        }]);
        let task = tokio::spawn(watcher.run(Metrics::new(), Duration::from_millis(20)));
        version("..2026_02_01");
        std::os::unix::fs::symlink("..2026_02_01", dir.path().join("..data_tmp")).unwrap();
        std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while count.load(Ordering::SeqCst) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never reloaded");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        task.abort();
    }
}
