import Foundation

/// A change to the file system, as a watcher reports it.
public enum FileSystemEvent: Sendable, Hashable, CustomStringConvertible {
    /// The item was created, or moved in from outside what is watched.
    case appeared(URL)
    /// The item's content or attributes changed, or another item replaced it (an atomic save).
    case changed(URL)
    /// The item was deleted, or moved out of what is watched.
    case removed(URL)
    /// The item moved within what is watched.
    case moved(from: URL, to: URL)
    /// The kernel's event queue overflowed: events were lost under this directory, which was
    /// rescanned. Reload whatever you show from it.
    case rescanned(URL)

    /// The item the event is about (the destination, for a move).
    public var url: URL {
        switch self {
        case .appeared(let url), .changed(let url), .removed(let url), .rescanned(let url): return url
        case .moved(_, let to): return to
        }
    }

    /// One line: the kind and the path(s).
    public var description: String {
        switch self {
        case .appeared(let url): return "appeared \(url.path)"
        case .changed(let url): return "changed \(url.path)"
        case .removed(let url): return "removed \(url.path)"
        case .moved(let from, let to): return "moved \(from.path) -> \(to.path)"
        case .rescanned(let url): return "rescanned \(url.path)"
        }
    }
}

/// Why a watch could not be set up.
public struct WatchError: Error, Sendable, CustomStringConvertible {
    /// A stable code to catch on.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let rawValue: String
        /// The per-user inotify watch limit is reached.
        public static let watchLimitReached = Code(rawValue: "watchLimitReached")
        /// The per-user inotify instance limit is reached.
        public static let instanceLimitReached = Code(rawValue: "instanceLimitReached")
        /// A system call failed; the underlying error says which.
        public static let systemCallFailed = Code(rawValue: "systemCallFailed")
        /// The watcher was stopped.
        public static let stopped = Code(rawValue: "stopped")
        /// A barrier was not seen within its timeout.
        public static let timedOut = Code(rawValue: "timedOut")
        /// The code's name.
        public var description: String { rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// The path being watched.
    public var path: String?
    /// A sentence for logs and users, with the remedy when there is one.
    public var message: String
    /// The cause.
    public var underlyingError: (any Error)?

    /// The code, the path, the message and the cause, on one line.
    public var description: String {
        var text = "WatchError.\(code)"
        if let path { text += " [\(path)]" }
        text += ": \(message)"
        if let underlyingError { text += " (cause: \(underlyingError))" }
        return text
    }
}
