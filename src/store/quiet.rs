//! No-op runs (`quiet.json`): a run that changed nothing is kept here, not in the durable history
//! (`runs.json`, `stats.json`), written atomically but never fsynced. The file names the durable
//! files it follows by the digest of their bytes: readers add its runs and take its statistics
//! only while those files are the ones it followed. The next durable write starts from what
//! readers see, so it folds the no-op runs in, and the file stops applying. A crash may lose the
//! file or leave it empty: then only no-op runs are missing from `status` and the counts.

use std::ffi::OsStr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{stats, RunRecord, RunStats, Store, StoreError, MAX_STORE_FILE, RUNS};
use crate::model::run::KEEP;
use crate::util::codec;

pub const QUIET: &str = "quiet.json";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Quiet {
    /// What runs.json was (`Store::durable`) when `runs` were kept on top of it.
    runs_base: String,
    /// The no-op runs since runs.json was last written, oldest first, abridged.
    runs: Vec<RunRecord>,
    /// What stats.json was when `stats` were counted from it.
    stats_base: String,
    /// stats.json's statistics with the no-op runs counted.
    stats: RunStats,
}

/// What a durable history file is named by when it is absent.
const ABSENT: &str = "absent";

impl Store {
    /// A durable history file's bytes, `None` when absent.
    fn durable_bytes(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match self.dir.read(OsStr::new(name), MAX_STORE_FILE) {
            Ok(found) => Ok(found.map(|(_, bytes)| bytes)),
            Err(e) => Err(self.error(name, format!("cannot be read: {e}"))),
        }
    }

    /// A durable history file's bytes (`None` when absent) and the digest a quiet record names
    /// it by.
    fn durable(&self, name: &str) -> Result<(Option<Vec<u8>>, String), StoreError> {
        let bytes = self.durable_bytes(name)?;
        let base = match &bytes {
            Some(bytes) => codec::sha256_hex(bytes),
            None => ABSENT.to_string(),
        };
        Ok((bytes, base))
    }

    /// Whether runs.json reads as a history (absent is an empty one), its no-op runs aside.
    pub(super) fn durable_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let bytes = self.durable_bytes(RUNS)?;
        self.parse_durable(RUNS, bytes)
    }

    fn parse_durable<T: DeserializeOwned + Default>(
        &self,
        name: &str,
        bytes: Option<Vec<u8>>,
    ) -> Result<T, StoreError> {
        let Some(bytes) = bytes else {
            return Ok(T::default());
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            self.error(
                name,
                format!("cannot be read ({e}); it was left as it is for you to inspect"),
            )
        })
    }

    /// quiet.json when it can be read; missing, emptied or cut short by a crash, it holds no
    /// run at all (and is replaced by the next no-op).
    fn quiet(&self) -> Option<Quiet> {
        self.read_cache(QUIET)
    }

    /// The recent runs, oldest first: runs.json's, then the no-op runs kept since (the latest
    /// `KEEP` of them all).
    pub fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let (bytes, base) = self.durable(RUNS)?;
        let mut runs: Vec<RunRecord> = self.parse_durable(RUNS, bytes)?;
        if let Some(quiet) = self.quiet().filter(|q| q.runs_base == base) {
            runs.extend(quiet.runs);
            runs.drain(..runs.len().saturating_sub(KEEP));
        }
        Ok(runs)
    }

    /// The statistics: the last no-op's count when it follows stats.json, else stats.json's.
    pub fn stats(&self) -> Result<RunStats, StoreError> {
        let (bytes, base) = self.durable(stats::FILE)?;
        match self.quiet().filter(|q| q.stats_base == base) {
            Some(quiet) => Ok(quiet.stats),
            None => self.parse_durable(stats::FILE, bytes),
        }
    }

    /// Keeps a run that changed nothing, with the statistics `count` makes of it (on top of
    /// `stats()`), written without fsync: what a crash may lose is only no-op runs. Each file
    /// is read once.
    pub fn record_quiet(
        &self,
        run: &RunRecord,
        count: impl FnOnce(&mut RunStats),
    ) -> Result<(), StoreError> {
        let (_, runs_base) = self.durable(RUNS)?;
        let (stats_bytes, stats_base) = self.durable(stats::FILE)?;
        let (mut runs, kept_stats) = match self.quiet() {
            Some(q) => (
                Some(q.runs)
                    .filter(|_| q.runs_base == runs_base)
                    .unwrap_or_default(),
                Some(q.stats).filter(|_| q.stats_base == stats_base),
            ),
            None => (Vec::new(), None),
        };
        let mut stats = match kept_stats {
            Some(stats) => stats,
            None => self.parse_durable(stats::FILE, stats_bytes)?,
        };
        count(&mut stats);
        runs.push(run.abridged());
        runs.drain(..runs.len().saturating_sub(KEEP));
        let quiet = Quiet {
            runs_base,
            runs,
            stats_base,
            stats,
        };
        self.write_cache(QUIET, &quiet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::run::{RunOutcome, Trigger};
    use crate::store::LastRun;
    use crate::util::testutil::TempDir;

    fn run(started: u64) -> RunRecord {
        RunRecord {
            started,
            ended: started,
            ..RunRecord::empty(Trigger::Timer)
        }
    }

    fn counted(stats: &mut RunStats, record: &RunRecord) {
        let last = LastRun {
            started: record.started,
            ended: record.ended,
            outcome: RunOutcome::Converged,
            took_ms: None,
        };
        stats.record(record.trigger.first(), last, Default::default(), None, None);
    }

    fn started(store: &Store) -> Vec<u64> {
        store.runs().unwrap().iter().map(|r| r.started).collect()
    }

    /// No-op runs are seen on top of the durable history, folded into it by the next durable
    /// write, never counted twice; the durable files are not written for them.
    #[test]
    fn no_op_runs_are_seen_then_folded_into_the_next_durable_write() {
        let tmp = TempDir::new("store-quiet");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        store.record_run(&run(1), 1).unwrap();
        let mut stats = store.stats().unwrap();
        counted(&mut stats, &run(1));
        store.save_stats(&stats).unwrap();
        let durable = |name: &str| std::fs::read(tmp.path().join(name)).unwrap();
        let (runs_before, stats_before) = (durable(RUNS), durable(stats::FILE));

        for t in [2, 3] {
            store
                .record_quiet(&run(t), |s| counted(s, &run(t)))
                .unwrap();
        }
        assert_eq!(started(&store), [1, 2, 3]);
        assert_eq!(store.stats().unwrap().runs_total["timer"]["converged"], 3);
        assert_eq!(durable(RUNS), runs_before, "runs.json untouched");
        assert_eq!(durable(stats::FILE), stats_before, "stats.json untouched");

        // A run that changed something: both durable files start from what is seen.
        store.record_run(&run(4), 4).unwrap();
        let mut stats = store.stats().unwrap();
        counted(&mut stats, &run(4));
        store.save_stats(&stats).unwrap();
        assert_eq!(started(&store), [1, 2, 3, 4]);
        assert_eq!(store.stats().unwrap().runs_total["timer"]["converged"], 4);
        store
            .record_quiet(&run(5), |s| counted(s, &run(5)))
            .unwrap();
        assert_eq!(started(&store), [1, 2, 3, 4, 5], "each once");
        assert_eq!(store.stats().unwrap().runs_total["timer"]["converged"], 5);
    }

    /// A quiet file a crash emptied or cut short holds nothing; one that follows other durable
    /// files (a durable write it did not see) is ignored, never added twice.
    #[test]
    fn a_lost_or_stale_quiet_file_is_no_runs() {
        let tmp = TempDir::new("store-quiet-lost");
        let store = Store::open(tmp.path(), true).unwrap().unwrap();
        store
            .record_quiet(&run(1), |s| counted(s, &run(1)))
            .unwrap();
        assert_eq!(started(&store), [1]);
        let quiet = std::fs::read(tmp.path().join(QUIET)).unwrap();
        for cut in [&b""[..], &quiet[..quiet.len() / 2]] {
            std::fs::write(tmp.path().join(QUIET), cut).unwrap();
            assert_eq!(started(&store), Vec::<u64>::new());
            assert_eq!(store.stats().unwrap(), RunStats::default());
        }
        std::fs::write(tmp.path().join(QUIET), &quiet).unwrap();
        std::fs::write(tmp.path().join(RUNS), "[]").unwrap();
        std::fs::write(tmp.path().join(stats::FILE), "{}").unwrap();
        assert_eq!(started(&store), Vec::<u64>::new());
        assert_eq!(store.stats().unwrap(), RunStats::default());
    }
}
