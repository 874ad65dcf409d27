import SystemPackage

/// An error from a system call, keeping the call's name, the `errno` it failed with and the
/// path it was working on.
///
/// Every failing system call in Concord surfaces as this error (or wrapped by a higher-level
/// error that keeps it as its cause), so a log line always says which call failed on which file
/// and why.
public struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The name of the system call that failed, for example `"flock"` or `"rename"`.
    public var systemCall: String
    /// The error number the call failed with.
    public var errno: Errno
    /// The path the call was working on, when there was one.
    public var path: String?
    /// Set when the call failed after a file's new content was already in place: the `fsync` of
    /// the folder after the rename of a replacement (``AtomicFile``). The new content is what
    /// every reader sees and survives anything short of a power cut, which may still bring the
    /// old content back. Writing it again would not help; a caller that reports the write as
    /// failed invites a retry that does the work twice.
    public var contentReplaced: Bool

    /// Creates an error for a failed system call.
    public init(systemCall: String, errno: Errno, path: String? = nil, contentReplaced: Bool = false) {
        self.systemCall = systemCall
        self.errno = errno
        self.path = path
        self.contentReplaced = contentReplaced
    }

    /// The call, the path, the error's text and number, on one line.
    public var description: String {
        if let path {
            return "\(systemCall)(\(path)): \(errno.description) (errno \(errno.rawValue))"
        }
        return "\(systemCall): \(errno.description) (errno \(errno.rawValue))"
    }
}
