import ConcordSystem
import Foundation

// Baselines without holding them. A baseline is one log file (the format of LogFile.swift, its
// payload that of `BaselinePayload`) that folds a whole store: hundreds of thousands of records.
// Written, its changes go to a spool file as the store is enumerated, then the file is written
// from the spool; read, the file is checked once (checksum, every change decoded and checked)
// and its changes are read again in batches as they are applied. Memory follows the batch and a
// window of the file, never the store.

/// A baseline file, checked, whose changes are read in batches (see ``forEachBatch(of:_:)``).
///
/// The file stays open while this exists: a newer baseline that replaces it (same name, a
/// rename over it) does not change what is read.
final class BaselineFile {
    /// The file.
    let url: URL
    /// Its header (device, sequence, schema version, container); the payload is not held.
    let log: LogFile
    /// The positions in each device's logs it covers.
    let covers: [String: UInt64]
    /// The removed duplicates it carries, each with its winner (see ``BaselinePayload/redirects``).
    let redirects: [String: String]?
    /// See ``BaselinePayload/collectedThrough``.
    let collectedThrough: SyncClock?
    /// See ``BaselinePayload/versions``.
    let versions: [String: LogVersions]?
    /// How many changes it holds.
    let changeCount: Int
    private let handle: FileHandle
    /// Where the changes lie in the file.
    private let changes: Range<Int>
    /// The changes of a format 1 (JSON) baseline: old, small, held.
    private let heldChanges: [SyncChange]?

    /// How many logs it covers in all (see ``BaselinePayload/total``).
    var total: UInt64 { BaselinePayload(covers: covers, changes: []).total }

    /// Opens and checks the baseline at `url`: the file is a complete, intact log, its payload a
    /// baseline whose every change decodes, and `check` finds nothing wrong with any batch of
    /// them (it returns the problem).
    ///
    /// - Throws: ``SyncError`` naming the file.
    init(_ url: URL, check: ([SyncChange]) -> String?) throws {
        self.url = url
        // One open file throughout: what is checked is what is read.
        do {
            handle = try FileHandle(forReadingFrom: url)
        } catch {
            throw SyncError(.ioFailed, "cannot open the baseline", url: url, underlying: error)
        }
        let (log, payload): (LogFile, Range<Int>)
        do {
            (log, payload) = try LogFile.decodeHeader(of: handle, url: url)
        } catch {
            try? handle.close()
            throw error
        }
        self.log = log
        func corrupt(_ message: String) -> SyncError { SyncError(.corruptLog, message, url: url) }
        guard log.formatVersion >= 2 else {
            // JSON: read whole, as it always was.
            let data: Data
            do {
                try handle.seek(toOffset: 0)
                data = try handle.readToEnd() ?? Data()
            } catch {
                throw SyncError(.ioFailed, "cannot read the baseline", url: url, underlying: error)
            }
            let whole = try BaselinePayload.decode(from: try LogFile.decode(data, url: url))
            if let problem = check(whole.changes) { throw corrupt(problem) }
            (covers, redirects, collectedThrough, versions) = (
                whole.covers, whole.redirects, whole.collectedThrough, whole.versions
            )
            (changeCount, changes, heldChanges) = (whole.changes.count, 0..<0, whole.changes)
            return
        }
        var reader = WindowedReader(handle: handle, range: payload, url: url)
        do {
            guard try reader.read({ reader throws(BinaryCodecError) in try reader.byte() }) == SyncPayload.binaryMarker
            else { throw corrupt("not a binary baseline") }
            covers = try reader.read { reader throws(BinaryCodecError) in
                try reader.dictionary { reader throws(BinaryCodecError) in try reader.varint() }
            }
            let count = try reader.read { reader throws(BinaryCodecError) in try reader.varint() }
            // Each change takes at least 20 bytes.
            guard count <= UInt64(payload.upperBound - reader.offset) / 20 else {
                throw corrupt("a count of \(count) changes exceeds the bytes left")
            }
            changeCount = Int(count)
            let start = reader.offset
            try reader.changes(changeCount, batch: Self.batchSize) { batch in
                if let problem = check(batch) { throw corrupt(problem) }
            }
            changes = start..<reader.offset
            // From format 5, the redirects, the horizon and the versions, always.
            if log.formatVersion >= 5 {
                (redirects, collectedThrough, versions) = try reader.read { reader throws(BinaryCodecError) in
                    try BaselinePayload.decodeEnd(&reader)
                }
                guard reader.isAtEnd else { throw corrupt("bytes after the last change") }
                heldChanges = nil
                return
            }
            versions = nil
            // From format 3, the redirects of removed duplicates, when there are any; then, when
            // there is one, the newest history among the tombstones collected.
            var redirects: [String: String]?
            if log.formatVersion >= 3, !reader.isAtEnd {
                let read = try reader.read { reader throws(BinaryCodecError) in
                    try reader.dictionary { reader throws(BinaryCodecError) in try reader.string() }
                }
                redirects = read.isEmpty ? nil : read
            }
            self.redirects = redirects
            collectedThrough =
                log.formatVersion >= 3 && !reader.isAtEnd
                ? try reader.read { reader throws(BinaryCodecError) in try reader.clock() } : nil
            guard reader.isAtEnd else { throw corrupt("bytes after the last change") }
        } catch let error as BinaryCodecError {
            throw corrupt("the baseline cannot be decoded: \(error)")
        }
        heldChanges = nil
    }

    deinit { try? handle.close() }

    /// What the baseline at `url` claims to cover, read from the start of its payload, without
    /// its checksum or its changes; `nil` when that cannot be read, or for a format 1 (JSON)
    /// baseline. A claim, not a check: checked (``init(_:check:)``), the file covers just that,
    /// or cannot be used at all.
    static func claimedCovers(at url: URL) -> [String: UInt64]? {
        claimedStart(at: url)?.covers
    }

    /// What the baseline at `url` claims to cover and how many changes it claims to hold, read as
    /// ``claimedCovers(at:)`` reads (a claim, not a check).
    static func claimedStart(at url: URL) -> (covers: [String: UInt64], changeCount: UInt64)? {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() }
        guard let (log, payload) = try? LogFile.decodeHeader(of: handle, url: url, checkingSum: false),
            log.formatVersion >= 2
        else {
            return nil
        }
        var reader = WindowedReader(handle: handle, range: payload, url: url)
        guard (try? reader.read({ reader throws(BinaryCodecError) in try reader.byte() })) == SyncPayload.binaryMarker
        else { return nil }
        return try? reader.read { reader throws(BinaryCodecError) in
            let covers = try reader.dictionary { reader throws(BinaryCodecError) in try reader.varint() }
            return (covers, try reader.varint())
        }
    }

    /// How many changes a batch holds.
    static let batchSize = 1000

    /// Reads the changes again, in file order, `size` at a time.
    func forEachBatch(of size: Int = BaselineFile.batchSize, _ body: ([SyncChange]) throws -> Void) throws {
        if let heldChanges {
            for chunk in heldChanges.chunked(size) { try body(Array(chunk)) }
            return
        }
        var reader = WindowedReader(handle: handle, range: changes, url: url)
        do {
            try reader.changes(changeCount, batch: size, body)
        } catch let error as BinaryCodecError {
            throw SyncError(.corruptLog, "the baseline changed since it was checked: \(error)", url: url)
        }
    }
}

/// Reads a range of a file through a window of about a megabyte, one ``BinaryReader`` item at
/// a time: an item that does not fit the window is read again with a larger one.
struct WindowedReader {
    let handle: FileHandle
    let url: URL
    /// Where the range ends in the file.
    let end: Int
    private var buffer: [UInt8] = []
    /// The file offset of `buffer[0]`.
    private var base: Int
    private var position = 0
    /// How much a refill reads ahead.
    static let window = 1 << 20

    init(handle: FileHandle, range: Range<Int>, url: URL) {
        self.handle = handle
        self.url = url
        base = range.lowerBound
        end = range.upperBound
    }

    /// The file offset of the next read.
    var offset: Int { base + position }
    /// Whether the whole range was read.
    var isAtEnd: Bool { offset == end }

    /// The next item, as `decode` reads it.
    mutating func read<T>(_ decode: (inout BinaryReader) throws(BinaryCodecError) -> T) throws -> T {
        var ahead = Self.window
        if buffer.count - position < Self.window / 4, base + buffer.count < end { try fill(ahead) }
        while true {
            var reader = BinaryReader(buffer, from: position)
            do {
                let value = try decode(&reader)
                position = reader.position
                return value
            } catch {
                // Cut short by the window, not by the range: again, with more of the file.
                guard base + buffer.count < end else { throw error }
                ahead = max(ahead, buffer.count - position) * 2
                try fill(ahead)
            }
        }
    }

    /// The next `count` changes, handed to `body` `size` at a time.
    mutating func changes(_ count: Int, batch size: Int, _ body: ([SyncChange]) throws -> Void) throws {
        var batch: [SyncChange] = []
        batch.reserveCapacity(min(size, count))
        for index in 0..<count {
            batch.append(try read { reader throws(BinaryCodecError) in try reader.change() })
            if batch.count == size || index == count - 1 {
                try body(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
    }

    /// Keeps the unread bytes and reads up to `ahead` bytes from the next read on.
    private mutating func fill(_ ahead: Int) throws {
        let kept = buffer[position...]
        base += position
        position = 0
        let want = min(ahead, end - base) - kept.count
        guard want > 0 else {
            buffer = Array(kept)
            return
        }
        let more: Data
        do {
            try handle.seek(toOffset: UInt64(base + kept.count))
            more = try handle.read(upToCount: want) ?? Data()
        } catch {
            throw SyncError(.ioFailed, "cannot read the baseline", url: url, underlying: error)
        }
        guard more.count == want else {
            throw SyncError(.truncatedLog, "the baseline ends before its checked length", url: url)
        }
        var next = [UInt8]()
        next.reserveCapacity(kept.count + want)
        next.append(contentsOf: kept)
        next.append(contentsOf: more)
        buffer = next
    }
}

/// The changes of a baseline being written, encoded into an unnamed temporary file as they come
/// (the store is enumerated batch by batch), then copied into the baseline file.
final class BaselineSpool {
    private let handle: FileHandle
    private var writer = BinaryWriter(reservingCapacity: 1 << 20)
    /// The changes spooled.
    private(set) var count = 0
    /// Their encoded size in bytes.
    private(set) var size = 0

    /// A spool in the temporary directory (`TMPDIR`), removed from the directory at once: it
    /// goes when it is closed, whatever happens.
    init() throws {
        let path = URL(fileURLWithPath: NSTemporaryDirectory())
            .appendingPathComponent("concord-baseline-\(RandomSource.uuid().uuidString).spool").path
        do {
            try FileSystem.createFile(at: path)
            handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        } catch {
            try? FileSystem.removeFile(at: path)
            throw SyncError(.ioFailed, "cannot make a spool file for the baseline", url: URL(fileURLWithPath: path))
        }
        try? FileSystem.removeFile(at: path)
    }

    deinit { try? handle.close() }

    /// Adds `change`.
    func append(_ change: SyncChange) throws {
        writer.change(change)
        count += 1
        if writer.bytes.count >= 1 << 20 { try flush() }
    }

    private func flush() throws {
        guard !writer.bytes.isEmpty else { return }
        do {
            try handle.write(contentsOf: writer.bytes)
        } catch {
            throw SyncError(.ioFailed, "cannot write the baseline's spool file", underlying: error)
        }
        size += writer.bytes.count
        writer = BinaryWriter(reservingCapacity: 1 << 20)
    }

    /// The encoded size once everything is spooled.
    func finish() throws -> Int {
        try flush()
        return size
    }

    /// Hands every spooled byte to `write`, a megabyte at a time.
    func copy(to write: (UnsafeRawBufferPointer) throws -> Void) throws {
        try flush()
        do {
            try handle.seek(toOffset: 0)
        } catch {
            throw SyncError(.ioFailed, "cannot read the baseline's spool file", underlying: error)
        }
        var left = size
        while left > 0 {
            let chunk: Data
            do {
                chunk = try handle.read(upToCount: min(left, 1 << 20)) ?? Data()
            } catch {
                throw SyncError(.ioFailed, "cannot read the baseline's spool file", underlying: error)
            }
            guard !chunk.isEmpty else { throw SyncError(.ioFailed, "the baseline's spool file ends early") }
            try chunk.withUnsafeBytes { try write($0) }
            left -= chunk.count
        }
    }
}
