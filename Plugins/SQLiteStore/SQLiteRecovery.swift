import Foundation
import Persistence

/// Which check the store runs as it opens (the `integrityCheck` and `integrityCheckInterval`
/// settings).
enum IntegrityCheckPolicy: Equatable {
    /// `PRAGMA integrity_check` (every page, and every index against its table) when the last
    /// session did not close the database cleanly, or when the last full check is older than
    /// `interval` seconds (or was never made); nothing else on a clean open (the default,
    /// `"afterUncleanClose"`).
    case afterUncleanClose(interval: TimeInterval)
    /// `PRAGMA quick_check` at every open (`"quick"`, or `"always"`): pages only, not indexes.
    case quick
    /// `PRAGMA integrity_check` at every open (`"full"`).
    case full
    /// Never (`"never"`): the header and SQLite's own checks only.
    case never

    /// How old the last full check may be before a clean open runs one again: one day.
    static let defaultInterval: TimeInterval = 86_400

    init(setting: String?, interval: String?, url: URL) throws(PersistenceError) {
        var seconds = Self.defaultInterval
        if let interval { seconds = try SQLiteStore.seconds(interval, setting: "integrityCheckInterval", url: url) }
        switch setting {
        case nil, "afterUncleanClose": self = .afterUncleanClose(interval: seconds)
        case "quick", "always": self = .quick
        case "full": self = .full
        case "never": self = .never
        case let other?:
            throw PersistenceError(
                .invalidRequest,
                "integrityCheck must be afterUncleanClose, quick (or always), full, or never, not \(other)",
                url: url
            )
        }
    }

    /// The check to run on a database found in `state`, whose last full check passed at
    /// `lastFullCheck` (`nil`: never, as far as the store recorded), at `now`.
    func check(_ state: LeftoverState, lastFullCheck: Date?, now: Date = Date()) -> IntegrityCheck {
        switch self {
        case .afterUncleanClose(let interval):
            if state.isUnclean { return .full(because: .uncleanClose(logSize: state.logSize)) }
            guard let lastFullCheck else { return .full(because: .neverChecked) }
            let age = now.timeIntervalSince(lastFullCheck)
            return age > interval || age < -interval ? .full(because: .intervalElapsed(age: age)) : .none
        case .quick: return .quick
        case .full: return .full(because: .setting)
        case .never: return .none
        }
    }
}

/// A check the store runs as it opens, and why.
enum IntegrityCheck: Equatable {
    enum Reason: Equatable {
        case uncleanClose(logSize: Int)
        case neverChecked
        case intervalElapsed(age: TimeInterval)
        case setting

        /// Why, as the error says it.
        var text: String {
            switch self {
            case .uncleanClose(let size):
                return "checked because the last session left \(size) bytes in the -wal: it was not closed cleanly"
            case .neverChecked: return "checked because the store records no full check"
            case .intervalElapsed(let age):
                return "checked because the last full check was \(Int(age / 3600)) hours ago"
            case .setting: return "checked at every open (integrityCheck: full)"
            }
        }
    }

    case none
    case quick
    case full(because: Reason)

    /// The pragma that runs it.
    var pragma: String? {
        switch self {
        case .none: return nil
        case .quick: return "quick_check"
        case .full: return "integrity_check"
        }
    }

    /// Whether it compares every index with its table.
    var isFull: Bool { if case .full = self { return true } else { return false } }
}

/// What the database's companion files say about how the last session ended, read before any
/// connection opens them.
///
/// SQLite deletes the write-ahead log when the last connection closes cleanly (after
/// checkpointing it into the database). A non-empty `-wal` at open therefore means either that
/// another connection has the database open right now, or that a process died with it open:
/// maybe in the middle of a checkpoint, when the database's header already counts pages that are
/// still only in the log. Both are normal states SQLite recovers from, so the header check does
/// not judge such a file; SQLite reads it through the log, and the integrity check judges it.
struct LeftoverState {
    /// The size of the `-wal` file (0 when there is none).
    var logSize: Int

    init(databasePath path: String) {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path + "-wal")
        logSize = (attributes?[.size] as? NSNumber)?.intValue ?? 0
    }

    /// A log with frames in it: the last session did not end with a clean close (or is still going).
    var isUnclean: Bool { logSize > 0 }
}

/// Why SQLite could not create or write the store's files, found by asking the file system the
/// same question with an error number.
///
/// SQLite reports a folder it cannot write as "unable to open database file" or "attempt to
/// write a readonly database", without the folder or the errno; this finds both.
enum WriteAccess {
    /// The folder or file that cannot be written and the errno that says why; `nil` when the
    /// store's folder and its existing files can all be written (the failure is elsewhere).
    static func failure(at url: URL) -> (url: URL, code: POSIXErrorCode)? {
        let folder = url.deletingLastPathComponent()
        let probe = folder.appendingPathComponent(
            ".concord-write-probe-\(StoreMetadata.makeIdentifier().uuidString)",
            isDirectory: true
        )
        do {
            try FileManager.default.createDirectory(at: probe, withIntermediateDirectories: false)
            try? FileManager.default.removeItem(at: probe)
        } catch {
            if let code = posixCode(of: error) { return (folder, code) }
        }
        for file in [url, URL(fileURLWithPath: url.path + "-wal"), URL(fileURLWithPath: url.path + "-shm")] {
            do {
                try FileHandle(forUpdating: file).close()
            } catch {
                if let code = posixCode(of: error), code != .ENOENT { return (file, code) }
            }
        }
        return nil
    }

    /// The error a store reports when `failure(at:)` found one: the place, the errno's name and
    /// text, and what to do.
    static func error(
        _ failure: (url: URL, code: POSIXErrorCode),
        store url: URL,
        doing what: String,
        cause: any Error & Sendable
    )
        -> PersistenceError
    {
        let place =
            failure.url.path == url.deletingLastPathComponent().path
            ? "the folder \(failure.url.path)" : "the file \(failure.url.path)"
        let advice: String
        switch failure.code {
        case .EROFS:
            advice =
                "it is on a read-only file system: remount it read-write, move the store to a writable folder, or open the store read-only"
        case .EACCES, .EPERM:
            advice =
                "this user may not write there: fix its owner or permissions (or an immutable attribute), move the store, or open it read-only"
        case .ENOSPC, .EDQUOT: advice = "the disk or quota is full: free space"
        default: advice = "the store needs to create and write its database, -wal and -shm files there"
        }
        return PersistenceError(
            .notWritable,
            "\(what) failed: cannot write in \(place): \(name(of: failure.code))\(text(of: failure.code).map { " (\($0))" } ?? ""); \(advice)",
            url: failure.url,
            underlying: POSIXError(failure.code)
        )
    }

    /// The errno's text, for the ones a store's folder fails with.
    static func text(of code: POSIXErrorCode) -> String? {
        switch code {
        case .EROFS: return "read-only file system"
        case .EACCES: return "permission denied"
        case .EPERM: return "operation not permitted"
        case .ENOSPC: return "no space left on device"
        case .EDQUOT: return "disk quota exceeded"
        default: return nil
        }
    }

    /// `EROFS` for `.EROFS`, and so on; `errno N` for the rest.
    static func name(of code: POSIXErrorCode) -> String {
        switch code {
        case .EROFS: return "EROFS"
        case .EACCES: return "EACCES"
        case .EPERM: return "EPERM"
        case .ENOSPC: return "ENOSPC"
        case .EDQUOT: return "EDQUOT"
        case .ENOENT: return "ENOENT"
        case .ENOTDIR: return "ENOTDIR"
        case .EISDIR: return "EISDIR"
        default: return "errno \(code.rawValue)"
        }
    }

    /// The errno behind a Foundation file error (its underlying POSIX error).
    private static func posixCode(of error: any Error) -> POSIXErrorCode? {
        if let error = error as? POSIXError { return error.code }
        var candidate = error as NSError
        if let cocoa = error as? CocoaError, let underlying = cocoa.underlying {
            candidate = underlying as NSError
        } else if let underlying = candidate.userInfo[NSUnderlyingErrorKey] as? any Error {
            candidate = underlying as NSError
        }
        guard candidate.domain == NSPOSIXErrorDomain else { return nil }
        return POSIXErrorCode(rawValue: Int32(candidate.code))
    }
}

extension SQLiteStore {
    /// The value of a setting that is a number of seconds (`text`), or an error naming the
    /// setting and the store.
    static func seconds(_ text: String, setting name: String, url: URL) throws(PersistenceError) -> TimeInterval {
        guard let value = TimeInterval(text), value >= 0 else {
            throw PersistenceError(.invalidRequest, "\(name) must be a number of seconds, not \(text)", url: url)
        }
        return value
    }
}
