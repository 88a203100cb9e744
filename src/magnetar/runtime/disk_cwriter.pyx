# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The journal's writer threads with no GIL between jobs (issue 22, session 22): Cython, built by
``scripts/build_compiled.py`` beside the mypyc build and loaded by ``runtime.disk_writer``.

A job is a short list of writes (``pwritev2`` of a list of buffers at an offset, with flags such
as ``RWF_DSYNC``, repeated until every byte is written) and ``fdatasync`` calls, run in order by
one of the writer's threads; the first failure ends the job. The event loop submits a job
(``Writer.submit``: the buffers are pinned with the buffer protocol until the answer), and takes
the answers of its ``Port`` (``Port.drain``) when the port's ``eventfd`` is readable
(``loop.add_reader``). A thread takes the GIL once, when it starts, and never again: it waits for
jobs on a C condition variable, writes, and signals the port's ``eventfd`` (once until the next
drain). Python's writer threads (``runtime.disk_threads``) took a wake from a ``SimpleQueue``,
a GIL round trip after the system call while the loop held the GIL, and ``call_soon_threadsafe``
back: ~170-250 us of thread CPU per synced write against 35-60 us for the write itself
(docs/performance.md, session 21).

Fault points are not passed here: the loop splits a group's work into jobs at its armed points
and passes the points between them (``runtime.disk_file``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer, PyBuffer_Release
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from libc.errno cimport errno, EINTR, EAGAIN, EIO, EOPNOTSUPP, ENOSYS
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free

import threading

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t pwritev2(int fd, const iovec *iov, int iovcnt, long offset, int flags)

cdef extern from "<unistd.h>" nogil:
    int fdatasync(int fd)
    ssize_t read(int fd, void *buf, size_t count)
    ssize_t write(int fd, const void *buf, size_t count)
    int close(int fd)

cdef extern from "<time.h>" nogil:
    struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *tp)
    int CLOCK_MONOTONIC

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_cond_init(pthread_cond_t *c, const void *attr)
    int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
    int pthread_cond_signal(pthread_cond_t *c)

cdef enum:
    _OPS_MAX = 4  # operations one job holds at most (a fill, a write, a sync, with room to spare)
    _IOV_MAX = 1024  # buffers one ``pwritev2`` call takes at most (the kernel's IOV_MAX)

#: Operations one job holds at most.
OPS_MAX = _OPS_MAX

cdef struct Op:
    int fd
    int flags
    int64_t offset
    int first      # the op's first buffer in the job's ``iov``; -1: ``fdatasync(fd)``
    int count      # its buffers

cdef struct Job

cdef struct PortState:
    Job *done_head    # the jobs done since the last drain, in the order they finished
    Job *done_tail
    int signalled     # the eventfd was written since the last drain
    int fd            # the eventfd

cdef struct Job:
    Job *next
    PyObject *owner   # what the answer is for (a reference held until the drain)
    PyObject *port    # the Port it answers on (a reference held until the drain) ...
    PortState *state  # ... and its state, which the threads touch without the GIL
    Py_buffer *views
    iovec *iov
    int nviews
    Op ops[_OPS_MAX]
    int nops
    int error         # errno of the failed op (0: every op done)
    int failed        # the failed op's index (``nops``: none failed)
    int64_t took_ns


cdef class Writer


cdef int64_t _now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef int _run_op(Job *job, Op *op) noexcept nogil:
    cdef int rc
    if op.first < 0:
        while fdatasync(op.fd) != 0:
            if errno != EINTR:
                return errno
        return 0
    rc = _write_all_synced(op.fd, job.iov + op.first, op.count, op.offset, op.flags)
    return rc


cdef int _write_all_synced(int fd, iovec *iov, int count, int64_t offset, int flags) noexcept nogil:
    """Write every byte of ``iov[:count]`` at ``offset`` (the iovecs are consumed); 0 or an
    errno. A short write goes on with the rest; a write asked to be synced (``flags``:
    ``RWF_DSYNC``) that did not go in one ``pwritev2`` call with its flags (a short write, or a
    kernel that refuses them: plain writes then) is synced with ``fdatasync`` afterwards."""
    cdef ssize_t done
    cdef int batch
    cdef int want_sync = flags != 0
    cdef int one_call = 1
    while count > 0:
        batch = count if count < _IOV_MAX else _IOV_MAX
        done = pwritev2(fd, iov, batch, offset, flags)
        if done < 0:
            if errno == EINTR:
                continue
            if flags != 0 and (errno == EOPNOTSUPP or errno == ENOSYS):
                flags = 0
                one_call = 0
                continue
            return errno
        if done == 0:
            return EIO
        offset += done
        while count > 0 and <size_t>done >= iov[0].iov_len:
            done -= iov[0].iov_len
            iov += 1
            count -= 1
        if count > 0:
            one_call = 0
            if done > 0:
                iov[0].iov_base = <char *>iov[0].iov_base + done
                iov[0].iov_len -= done
    if want_sync and not one_call:
        while fdatasync(fd) != 0:
            if errno != EINTR:
                return errno
    return 0


cdef class Port:
    """Where a loop takes its jobs' answers: one ``eventfd`` (signalled once until the next
    ``drain``) and the list of jobs done. Closed when no job refers to it any more."""

    cdef PortState state
    cdef Writer writer

    def __cinit__(self, Writer writer, int fd):
        self.writer = writer
        self.state.fd = fd
        self.state.done_head = NULL
        self.state.done_tail = NULL
        self.state.signalled = 0

    def __dealloc__(self):
        if self.state.fd >= 0:
            close(self.state.fd)

    @property
    def fd(self):
        return self.state.fd

    def submit(self, object owner, list ops):
        """``Writer.submit`` of a job answered on this port."""
        self.writer.submit(self, owner, ops)

    def drain(self):
        """The answers of the jobs done since the last drain, in the order they finished:
        ``(owner, errno, failed op index, took ns)`` each (``errno`` 0: every op done)."""
        cdef uint64_t count
        cdef Job *job
        cdef Job *next_job
        cdef list answers = []
        # The eventfd first, then the list: a job that lands after the list was taken signals
        # again (its port was marked unsignalled under the lock), so none is left unannounced.
        read(self.state.fd, &count, 8)
        pthread_mutex_lock(&self.writer.lock)
        job = self.state.done_head
        self.state.done_head = NULL
        self.state.done_tail = NULL
        self.state.signalled = 0
        pthread_mutex_unlock(&self.writer.lock)
        while job != NULL:
            next_job = job.next
            answers.append((<object>job.owner, job.error, job.failed, job.took_ns))
            _free_job(job)
            job = next_job
        return answers


cdef void _free_job(Job *job) noexcept:
    """Release what a job holds (with the GIL)."""
    cdef int i
    for i in range(job.nviews):
        PyBuffer_Release(&job.views[i])
    free(job.views)
    free(job.iov)
    if job.owner != NULL:
        Py_DECREF(<object>job.owner)
    if job.port != NULL:
        Py_DECREF(<object>job.port)
    free(job)


cdef class Writer:
    """The threads (up to ``threads_max``, started as jobs find none idle) and their job queue."""

    cdef pthread_mutex_t lock
    cdef pthread_cond_t wake
    cdef Job *head
    cdef Job *tail
    cdef int queued
    cdef int idle
    cdef readonly int threads
    cdef readonly int threads_max
    cdef readonly long long jobs_done
    cdef object name

    def __cinit__(self, int threads_max, str name):
        pthread_mutex_init(&self.lock, NULL)
        pthread_cond_init(&self.wake, NULL)
        self.head = NULL
        self.tail = NULL
        self.queued = 0
        self.idle = 0
        self.threads = 0
        self.threads_max = threads_max if threads_max > 0 else 1
        self.jobs_done = 0
        self.name = name

    def port(self, int fd):
        """A ``Port`` over ``fd`` (a non-blocking ``eventfd``; the port closes it)."""
        return Port(self, fd)

    def submit(self, Port port, object owner, list ops):
        """Queue one job answered on ``port`` for ``owner``: ``ops`` is a list of
        ``(fd, buffers, offset, flags)``, a write of the buffers (objects with the buffer
        protocol) at ``offset`` with ``pwritev2`` flags, or ``(fd, None, 0, 0)``, an
        ``fdatasync``."""
        cdef Job *job
        cdef int nops = len(ops)
        cdef int nviews = 0
        cdef int i, k
        cdef Op *op
        cdef object buffers
        if nops < 1 or nops > _OPS_MAX:
            raise ValueError(f"a job holds 1 to {OPS_MAX} ops, not {nops}")
        for entry in ops:
            buffers = entry[1]
            if buffers is not None:
                nviews += len(buffers)
        job = <Job *>calloc(1, sizeof(Job))
        if job == NULL:
            raise MemoryError()
        try:
            if nviews:
                job.views = <Py_buffer *>calloc(nviews, sizeof(Py_buffer))
                job.iov = <iovec *>calloc(nviews, sizeof(iovec))
                if job.views == NULL or job.iov == NULL:
                    raise MemoryError()
            for i in range(nops):
                entry = ops[i]
                op = &job.ops[i]
                op.fd = entry[0]
                buffers = entry[1]
                op.offset = entry[2]
                op.flags = entry[3]
                if buffers is None:
                    op.first = -1
                    op.count = 0
                    continue
                op.first = job.nviews
                op.count = len(buffers)
                for piece in buffers:
                    k = job.nviews
                    PyObject_GetBuffer(piece, &job.views[k], PyBUF_SIMPLE)
                    job.nviews += 1
                    job.iov[k].iov_base = job.views[k].buf
                    job.iov[k].iov_len = <size_t>job.views[k].len
            job.nops = nops
        except BaseException:
            _free_job(job)
            raise
        Py_INCREF(owner)
        job.owner = <PyObject *>owner
        Py_INCREF(port)
        job.port = <PyObject *>port
        job.state = &port.state
        pthread_mutex_lock(&self.lock)
        if self.tail == NULL:
            self.head = job
        else:
            self.tail.next = job
        self.tail = job
        self.queued += 1
        start = self.queued > self.idle and self.threads < self.threads_max
        if start:
            self.threads += 1
        else:
            pthread_cond_signal(&self.wake)
        pthread_mutex_unlock(&self.lock)
        if start:
            try:
                threading.Thread(target=self._serve, name=f"{self.name}-{self.threads}", daemon=True).start()
            except BaseException:
                pthread_mutex_lock(&self.lock)
                self.threads -= 1
                pthread_cond_signal(&self.wake)
                pthread_mutex_unlock(&self.lock)
                raise

    def _serve(self):
        """A writer thread's life: the GIL is released at once and never taken again."""
        with nogil:
            self._serve_jobs()

    cdef void _serve_jobs(self) noexcept nogil:
        cdef Job *job
        cdef PortState *port
        cdef int i, rc, signal
        cdef int64_t started
        cdef uint64_t one = 1
        while True:
            pthread_mutex_lock(&self.lock)
            while self.head == NULL:
                self.idle += 1
                pthread_cond_wait(&self.wake, &self.lock)
                self.idle -= 1
            job = self.head
            self.head = job.next
            if self.head == NULL:
                self.tail = NULL
            self.queued -= 1
            pthread_mutex_unlock(&self.lock)
            job.next = NULL
            started = _now_ns()
            job.failed = job.nops
            for i in range(job.nops):
                rc = _run_op(job, &job.ops[i])
                if rc != 0:
                    job.error = rc
                    job.failed = i
                    break
            job.took_ns = _now_ns() - started
            port = job.state
            pthread_mutex_lock(&self.lock)
            self.jobs_done += 1
            if port.done_tail == NULL:
                port.done_head = job
            else:
                port.done_tail.next = job
            port.done_tail = job
            signal = not port.signalled
            port.signalled = 1
            pthread_mutex_unlock(&self.lock)
            if signal:
                while write(port.fd, &one, 8) < 0 and errno == EINTR:
                    pass
