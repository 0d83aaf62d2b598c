//! Python bindings of flashtree (module `flashtree._flashtree`, wrapped by
//! the `flashtree` package). Every call into the engine releases the GIL,
//! so several Python threads can use one store at once.

// The code pyo3 0.22 generates for #[pymethods] converts PyErr into itself.
#![allow(clippy::useless_conversion)]

use flashtree::db::{
    Db as EngineDb, Durability, Options, ScanDirection, Tree as EngineTree, WriteBatch,
    WriteOptions,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple, PyType};
use std::sync::{Arc, Mutex, RwLock};

create_exception!(_flashtree, Error, PyException, "Any flashtree error.");
create_exception!(
    _flashtree,
    InvalidArgumentError,
    Error,
    "A value the engine cannot take (a key too long, a batch too large, a bad option)."
);
create_exception!(
    _flashtree,
    CorruptError,
    Error,
    "The store's files are not what flashtree wrote."
);
create_exception!(
    _flashtree,
    StoreInUseError,
    Error,
    "Another open store (in this process or another) holds the store's lock."
);
create_exception!(
    _flashtree,
    StoreFullError,
    Error,
    "The store has no room left."
);
create_exception!(
    _flashtree,
    UnsupportedError,
    Error,
    "The environment refuses what the store needs (for example O_DIRECT)."
);
create_exception!(
    _flashtree,
    FailedError,
    Error,
    "A write or sync failed: the store stopped; close and reopen it to recover."
);
create_exception!(_flashtree, ClosedError, Error, "The store is closed.");

fn py_err(e: flashtree::Error) -> PyErr {
    use flashtree::Error as E;
    let message = e.to_string();
    match e {
        E::InvalidArgument(_) => InvalidArgumentError::new_err(message),
        E::Corrupt(_) | E::NotClosedCleanly(_) => CorruptError::new_err(message),
        E::InUse(_) => StoreInUseError::new_err(message),
        E::Full(_) => StoreFullError::new_err(message),
        E::Unsupported(_) => UnsupportedError::new_err(message),
        E::Failed(_) | E::Io(_) => FailedError::new_err(message),
        E::Closed => ClosedError::new_err(message),
        _ => Error::new_err(message),
    }
}

/// The engine, shared by a store's trees, batches and iterators; `None`
/// once closed.
type Shared = Arc<RwLock<Option<EngineDb>>>;

/// Runs `f` on the open engine without the GIL.
fn with_db<T: Send>(
    py: Python<'_>,
    shared: &Shared,
    f: impl FnOnce(&EngineDb) -> flashtree::Result<T> + Send,
) -> PyResult<T> {
    py.allow_threads(|| {
        let guard = shared.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(db) => f(db).map_err(py_err),
            None => Err(ClosedError::new_err("the store is closed")),
        }
    })
}

/// An open store. Use `flashtree.open(path, ...)`; closes at the end of a
/// `with` block.
#[pyclass(module = "flashtree._flashtree", frozen)]
struct Db {
    shared: Shared,
    path: String,
}

#[pymethods]
impl Db {
    /// The tree named `name`, created empty if missing.
    fn tree(&self, py: Python<'_>, name: &str) -> PyResult<Tree> {
        let owned = name.to_string();
        let tree = with_db(py, &self.shared, move |db| db.tree(&owned))?;
        Ok(Tree {
            shared: self.shared.clone(),
            tree,
            name: name.to_string(),
        })
    }

    /// Names of the store's trees.
    fn tree_names(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        with_db(py, &self.shared, |db| Ok(db.tree_names()))
    }

    /// A batch of puts and deletes over any trees, committed atomically
    /// (and durably, with durability="sync") at the end of a `with` block,
    /// or not at all if the block raises.
    fn batch(&self) -> Batch {
        Batch {
            shared: self.shared.clone(),
            batch: Mutex::new(Some(WriteBatch::new())),
        }
    }

    /// Makes every earlier change durable (useful with durability="buffered").
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        with_db(py, &self.shared, |db| db.sync())
    }

    /// Checks every tree and page; raises CorruptError on damage. Returns
    /// the number of records.
    fn check(&self, py: Python<'_>) -> PyResult<u64> {
        with_db(py, &self.shared, |db| {
            db.check()
                .map(|r| r.trees.iter().map(|(_, s)| s.entries).sum())
        })
    }

    /// Closes the store: writes what is in memory and a checkpoint. Later
    /// calls raise ClosedError. Closing twice is allowed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| {
            let db = self
                .shared
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            match db {
                Some(db) => db.close().map_err(py_err),
                None => Ok(()),
            }
        })
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.shared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The store's directory.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (_exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<flashtree.Db {:?}{}>",
            self.path,
            if self.closed() { " closed" } else { "" }
        )
    }
}

/// One named tree of a store: a sorted map from bytes to bytes.
#[pyclass(module = "flashtree._flashtree", frozen)]
struct Tree {
    shared: Shared,
    tree: EngineTree,
    name: String,
}

#[pymethods]
impl Tree {
    /// The tree's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    fn __getitem__<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let tree = self.tree;
        match with_db(py, &self.shared, move |db| db.get(tree, key))? {
            Some(v) => Ok(PyBytes::new_bound(py, &v)),
            None => Err(PyKeyError::new_err(PyBytes::new_bound(py, key).unbind())),
        }
    }

    /// The value of `key`, or `default` when absent.
    #[pyo3(signature = (key, default=None))]
    fn get(&self, py: Python<'_>, key: &[u8], default: Option<PyObject>) -> PyResult<PyObject> {
        let tree = self.tree;
        match with_db(py, &self.shared, move |db| db.get(tree, key))? {
            Some(v) => Ok(PyBytes::new_bound(py, &v).into_any().unbind()),
            None => Ok(default.unwrap_or_else(|| py.None())),
        }
    }

    fn __setitem__(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        let tree = self.tree;
        with_db(py, &self.shared, move |db| db.put(tree, key, value))
    }

    /// Sets `key` to `value` (durable when it returns, with durability="sync").
    fn put(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.__setitem__(py, key, value)
    }

    fn __delitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        let tree = self.tree;
        if with_db(py, &self.shared, move |db| db.delete(tree, key))? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(PyBytes::new_bound(py, key).unbind()))
        }
    }

    /// Deletes `key`; returns whether it was there.
    fn delete(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        let tree = self.tree;
        with_db(py, &self.shared, move |db| db.delete(tree, key))
    }

    /// Fills the tree's leaves from their neighbours and moves them to
    /// consecutive page ids in key order, so that scans out of memory read
    /// fewer pages, neighbouring leaves in one request; returns the number
    /// of leaves moved (0 when already in order).
    fn compact(&self, py: Python<'_>) -> PyResult<u64> {
        let tree = self.tree;
        with_db(py, &self.shared, move |db| {
            db.compact(tree).map(|s| s.leaves_moved)
        })
    }

    fn __contains__(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        let tree = self.tree;
        Ok(with_db(py, &self.shared, move |db| db.get(tree, key))?.is_some())
    }

    /// The values of `keys` (None where absent), looked up concurrently.
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        // The keys' bytes are read in place: `bytes` objects are immutable,
        // and `items` holds a reference to each while the GIL is released.
        // Other bytes-like keys are copied into new `bytes` first.
        let items: Vec<Bound<'py, PyBytes>> = keys
            .iter()?
            .map(|item| {
                let item = item?;
                match item.downcast_into::<PyBytes>() {
                    Ok(bytes) => Ok(bytes),
                    Err(e) => {
                        let owned: Vec<u8> = e.into_inner().extract()?;
                        Ok(PyBytes::new_bound(py, &owned))
                    }
                }
            })
            .collect::<PyResult<_>>()?;
        let key_slices: Vec<&[u8]> = items.iter().map(|b| b.as_bytes()).collect();
        let tree = self.tree;
        // All values land in one buffer; `spans[i]` is where value i is.
        let (data, spans) = with_db(py, &self.shared, |db| {
            let mut data: Vec<u8> = Vec::new();
            let mut spans: Vec<Option<(usize, usize)>> = vec![None; key_slices.len()];
            db.multi_get_each(tree, &key_slices, |i, value| {
                spans[i] = value.map(|v| {
                    data.extend_from_slice(v);
                    (data.len() - v.len(), data.len())
                });
            })?;
            Ok((data, spans))
        })?;
        let values = spans.iter().map(|span| match span {
            Some((start, end)) => PyBytes::new_bound(py, &data[*start..*end]).into_any(),
            None => py.None().into_bound(py),
        });
        Ok(PyList::new_bound(py, values))
    }

    /// (key, value) pairs with keys in [start, end), in key order, or
    /// descending with reverse=True.
    #[pyo3(signature = (start=None, end=None, reverse=false))]
    fn items(&self, start: Option<Vec<u8>>, end: Option<Vec<u8>>, reverse: bool) -> RangeIter {
        self.range(start, end, reverse, Yield::Items)
    }

    /// Keys in [start, end), in key order, or descending with reverse=True.
    #[pyo3(signature = (start=None, end=None, reverse=false))]
    fn keys(&self, start: Option<Vec<u8>>, end: Option<Vec<u8>>, reverse: bool) -> RangeIter {
        self.range(start, end, reverse, Yield::Keys)
    }

    /// Values of the keys in [start, end), in key order, or descending
    /// with reverse=True.
    #[pyo3(signature = (start=None, end=None, reverse=false))]
    fn values(&self, start: Option<Vec<u8>>, end: Option<Vec<u8>>, reverse: bool) -> RangeIter {
        self.range(start, end, reverse, Yield::Values)
    }

    fn __iter__(&self) -> RangeIter {
        self.range(None, None, false, Yield::Keys)
    }

    fn __repr__(&self) -> String {
        format!("<flashtree.Tree {:?}>", self.name)
    }
}

impl Tree {
    fn range(
        &self,
        start: Option<Vec<u8>>,
        end: Option<Vec<u8>>,
        reverse: bool,
        what: Yield,
    ) -> RangeIter {
        RangeIter {
            shared: self.shared.clone(),
            tree: self.tree,
            state: Mutex::new(RangeState {
                from: if reverse { end.clone() } else { start.clone() },
                skip_equal: false,
                start,
                end,
                reverse,
                buffered: std::collections::VecDeque::new(),
                done: false,
            }),
            what,
        }
    }
}

#[derive(Clone, Copy)]
enum Yield {
    Items,
    Keys,
    Values,
}

struct RangeState {
    /// Where the next fetch starts (None: the first key, or the last one
    /// going backward), and whether a key equal to it was already yielded.
    from: Option<Vec<u8>>,
    skip_equal: bool,
    start: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    reverse: bool,
    buffered: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

/// Records fetched per call into the engine while iterating.
const RANGE_FETCH: usize = 512;

impl RangeState {
    /// Fetches the next records of the range (in the engine, no GIL).
    fn fetch(&mut self, db: &EngineDb, tree: EngineTree) -> flashtree::Result<()> {
        let direction = if self.reverse {
            ScanDirection::Backward
        } else {
            ScanDirection::Forward
        };
        let mut fetched = 0;
        for entry in db.range(tree, self.from.as_deref(), direction) {
            let (key, value) = entry?;
            if self.skip_equal && self.from.as_deref() == Some(key.as_slice()) {
                continue;
            }
            let past_end = if self.reverse {
                self.start.as_deref().is_some_and(|s| key.as_slice() < s)
            } else {
                self.end.as_deref().is_some_and(|e| key.as_slice() >= e)
            };
            if past_end {
                self.done = true;
                return Ok(());
            }
            // Going backward from `end`, the end key itself is not in range.
            if self.reverse && self.end.as_deref().is_some_and(|e| key.as_slice() >= e) {
                continue;
            }
            self.from = Some(key.clone());
            self.skip_equal = true;
            self.buffered.push_back((key, value));
            fetched += 1;
            if fetched == RANGE_FETCH {
                return Ok(());
            }
        }
        self.done = true;
        Ok(())
    }
}

/// An iterator over a range of a tree; it fetches records in chunks and
/// sees changes made to parts of the tree it has not reached yet.
#[pyclass(module = "flashtree._flashtree", frozen)]
struct RangeIter {
    shared: Shared,
    tree: EngineTree,
    state: Mutex<RangeState>,
    what: Yield,
}

#[pymethods]
impl RangeIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        let tree = self.tree;
        let state = &self.state;
        // Records already fetched need no engine call (and no GIL release).
        let buffered = {
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            match s.buffered.pop_front() {
                Some(record) => Some(record),
                None if s.done => return Ok(None),
                None => None,
            }
        };
        let next = match buffered {
            Some(record) => Some(record),
            None => with_db(py, &self.shared, move |db| {
                let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                if s.buffered.is_empty() && !s.done {
                    s.fetch(db, tree)?;
                }
                Ok(s.buffered.pop_front())
            })?,
        };
        Ok(next.map(|(k, v)| match self.what {
            Yield::Items => {
                PyTuple::new_bound(py, [PyBytes::new_bound(py, &k), PyBytes::new_bound(py, &v)])
                    .into_any()
                    .unbind()
            }
            Yield::Keys => PyBytes::new_bound(py, &k).into_any().unbind(),
            Yield::Values => PyBytes::new_bound(py, &v).into_any().unbind(),
        }))
    }
}

/// Puts and deletes over any trees of one store, applied all or nothing.
#[pyclass(module = "flashtree._flashtree", frozen)]
struct Batch {
    shared: Shared,
    /// None once committed or discarded.
    batch: Mutex<Option<WriteBatch>>,
}

impl Batch {
    fn with_batch<T>(
        &self,
        f: impl FnOnce(&mut WriteBatch) -> flashtree::Result<T>,
    ) -> PyResult<T> {
        let mut guard = self.batch.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(b) => f(b).map_err(py_err),
            None => Err(Error::new_err(
                "the batch was already committed or discarded",
            )),
        }
    }
}

#[pymethods]
impl Batch {
    /// Sets `key` to `value` in `tree` when the batch commits.
    fn put(&self, tree: &Tree, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.check_store(tree)?;
        self.with_batch(|b| b.put(tree.tree, key, value))
    }

    /// Deletes `key` from `tree` when the batch commits.
    fn delete(&self, tree: &Tree, key: &[u8]) -> PyResult<()> {
        self.check_store(tree)?;
        self.with_batch(|b| b.delete(tree.tree, key))
    }

    /// Entries in the batch.
    fn __len__(&self) -> PyResult<usize> {
        self.with_batch(|b| Ok(b.len()))
    }

    /// Applies the batch atomically (durable when it returns, with
    /// durability="sync"); the batch cannot be used afterwards.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let batch = self
            .batch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Error::new_err("the batch was already committed or discarded"))?;
        with_db(py, &self.shared, move |db| {
            db.write(&batch, WriteOptions::default())
        })
    }

    /// Drops the batch's entries without applying them.
    fn discard(&self) {
        self.batch.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some() {
            self.discard();
        } else if self
            .batch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            self.commit(py)?;
        }
        Ok(false)
    }
}

impl Batch {
    fn check_store(&self, tree: &Tree) -> PyResult<()> {
        if Arc::ptr_eq(&self.shared, &tree.shared) {
            Ok(())
        } else {
            Err(InvalidArgumentError::new_err(format!(
                "tree {:?} belongs to another store than the batch",
                tree.name
            )))
        }
    }
}

/// Opens (or creates) the store in directory `path`.
///
/// pool_bytes: buffer pool size; durability: "sync" (a write returns when
/// it would survive a power cut), "buffered" (the log is synced within
/// max_delay_ms), or "none" (no log: a crash makes the store unopenable);
/// workers: worker threads; create: create the store if missing;
/// wal_bytes_per_worker: the log each worker preallocates on disk (default
/// 256 MiB, at least 1 MiB, a multiple of 4096).
#[pyfunction]
#[pyo3(signature = (path, pool_bytes=64 * 1024 * 1024, durability="sync", workers=1, create=true, max_delay_ms=10, wal_bytes_per_worker=None))]
// One Rust argument per Python keyword argument.
#[allow(clippy::too_many_arguments)]
fn open(
    py: Python<'_>,
    path: std::path::PathBuf,
    pool_bytes: u64,
    durability: &str,
    workers: usize,
    create: bool,
    max_delay_ms: u32,
    wal_bytes_per_worker: Option<u64>,
) -> PyResult<Db> {
    let durability = match durability {
        "sync" => Durability::Sync,
        "buffered" => Durability::Buffered { max_delay_ms },
        "none" => Durability::None,
        other => {
            return Err(InvalidArgumentError::new_err(format!(
                "durability must be \"sync\", \"buffered\" or \"none\", got {other:?}"
            )))
        }
    };
    let defaults = Options::default();
    let options = Options {
        pool_bytes,
        workers,
        durability,
        create_if_missing: create,
        wal_bytes_per_worker: wal_bytes_per_worker.unwrap_or(defaults.wal_bytes_per_worker),
        // A checkpoint every quarter of the log, as the default options do.
        checkpoint_log_bytes: wal_bytes_per_worker
            .map_or(defaults.checkpoint_log_bytes, |bytes| (bytes / 4).max(1)),
        ..defaults
    };
    let shown = path.display().to_string();
    let db = py
        .allow_threads(|| EngineDb::open(&path, options))
        .map_err(|e| {
            let message = format!("{shown}: {e}");
            let err = py_err(e);
            let ty = err.get_type_bound(py);
            PyErr::from_type_bound(ty, message)
        })?;
    Ok(Db {
        shared: Arc::new(RwLock::new(Some(db))),
        path: shown,
    })
}

#[pymodule]
fn _flashtree(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_class::<Db>()?;
    m.add_class::<Tree>()?;
    m.add_class::<Batch>()?;
    m.add_class::<RangeIter>()?;
    m.add("Error", py.get_type_bound::<Error>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type_bound::<InvalidArgumentError>(),
    )?;
    m.add("CorruptError", py.get_type_bound::<CorruptError>())?;
    m.add("StoreInUseError", py.get_type_bound::<StoreInUseError>())?;
    m.add("StoreFullError", py.get_type_bound::<StoreFullError>())?;
    m.add("UnsupportedError", py.get_type_bound::<UnsupportedError>())?;
    m.add("FailedError", py.get_type_bound::<FailedError>())?;
    m.add("ClosedError", py.get_type_bound::<ClosedError>())?;
    Ok(())
}
