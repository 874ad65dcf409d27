import Foundation

/// Why a folder-sync operation failed: a stable code to `catch` on, the file concerned, the cause
/// in words, and the underlying error when there is one.
public struct SyncError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure.
    public enum Code: String, Sendable, Hashable {
        /// A log file is damaged: wrong magic, bad checksum, inconsistent or absurd lengths, a
        /// header that does not match the file's name or folder, or content that is not a log.
        case corruptLog
        /// A log file ends before the lengths in its header say it should: still arriving, or cut
        /// short for good.
        case truncatedLog
        /// A log file written in a newer log format than this version of Concord reads. The file
        /// is intact (its checksum holds); it needs an upgrade, not a repair.
        case unsupportedLogVersion
        /// A conflict copy that holds a different, valid log for the same device and sequence as
        /// the original: two installations wrote under one device id (or a device restored on a
        /// new machine numbered its logs before its old ones arrived). Both logs are applied.
        case conflictingLog
        /// A log already exists under the name the writer needs, with different content. Logs are
        /// immutable: the writer never replaces one.
        case logExists
        /// A log that cannot be written: an invalid device id, sequence 0, or a payload larger
        /// than ``LogFile/maximumPayloadSize``.
        case invalidLog
        /// Reading or writing a file in the container failed.
        case ioFailed
        /// The container, or the store's folder inside it, is missing or cannot be listed.
        case containerUnavailable
        /// A device id that cannot name a device folder.
        case invalidDeviceID
        /// A sentinel file is damaged, oversized or not a sentinel.
        case corruptSentinel
        /// The operation needs sync to be in another state (enabled, paused, ...).
        case invalidState
    }

    /// The kind of failure.
    public var code: Code
    /// The file or folder concerned, if one is.
    public var url: URL?
    /// What went wrong, in words.
    public var message: String
    /// The error that caused this one, if any.
    public var underlying: (any Error & Sendable)?

    /// An error.
    public init(_ code: Code, _ message: String, url: URL? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.url = url
        self.message = message
        self.underlying = underlying
    }

    /// `code: message (path) [underlying]`.
    public var description: String {
        var text = "\(code.rawValue): \(message)"
        if let url { text += " (\(url.path))" }
        if let underlying { text += " [\(underlying)]" }
        return text
    }
}
