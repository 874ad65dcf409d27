import ConcordSystem
import Foundation

/// Why a coordinated access failed.
///
/// Catch on ``code``; ``url`` names the item and ``underlyingError`` keeps the cause (a
/// `SystemCallError` with the call, errno and path, or the error a presenter threw).
public struct FileCoordinationError: Error, Sendable, CustomStringConvertible {
    /// A stable code to catch on.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let rawValue: String
        /// The coordination waited longer than the coordinator's timeout.
        public static let timedOut = Code(rawValue: "timedOut")
        /// ``FileCoordinator/cancel()`` or task cancellation ended the wait.
        public static let cancelled = Code(rawValue: "cancelled")
        /// A presenter's hook threw, vetoing the access.
        public static let presenterFailed = Code(rawValue: "presenterFailed")
        /// The lock directory could not be created or is not safe to use.
        public static let lockDirectoryUnusable = Code(rawValue: "lockDirectoryUnusable")
        /// A system call failed; ``FileCoordinationError/underlyingError`` is the `SystemCallError`.
        public static let systemCallFailed = Code(rawValue: "systemCallFailed")
        /// The request itself is malformed (for example a URL that is not a file URL).
        public static let invalidRequest = Code(rawValue: "invalidRequest")

        /// The code's name, as written after `.` above.
        public var description: String { rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// The item the failing access was for, when there was one.
    public var url: URL?
    /// A sentence for logs and users.
    public var message: String
    /// The cause, if another error caused this one.
    public var underlyingError: (any Error)?
    /// The process whose presenter refused, or did not answer in time, when the failure came from
    /// a presenter in another process (its cause is then a ``RemotePresenterError``).
    public var presentingProcess: Int32?

    /// Creates an error; Concord's own code uses this, and so may adopters wrapping coordination.
    public init(
        code: Code,
        url: URL?,
        message: String,
        underlyingError: (any Error)? = nil,
        presentingProcess: Int32? = nil
    ) {
        self.code = code
        self.url = url
        self.message = message
        self.underlyingError = underlyingError
        self.presentingProcess = presentingProcess
    }

    /// The code, the file, the presenting process, the message and the cause, on one line.
    public var description: String {
        var text = "FileCoordinationError.\(code)"
        if let url { text += " [\(url.path)]" }
        if let presentingProcess { text += " [process \(presentingProcess)]" }
        text += ": \(message)"
        if let underlyingError { text += " (cause: \(underlyingError))" }
        return text
    }

    static func systemCall(_ error: SystemCallError, url: URL?) -> FileCoordinationError {
        FileCoordinationError(
            code: .systemCallFailed,
            url: url,
            message: "\(error.systemCall) failed",
            underlyingError: error
        )
    }
}
