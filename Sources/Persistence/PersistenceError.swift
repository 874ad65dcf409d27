import Foundation

/// Why a persistence operation failed: a stable code to `catch` on, the file concerned, the
/// cause in words, and the underlying error when there is one.
public struct PersistenceError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure.
    public enum Code: String, Sendable, Hashable {
        /// The store's file is damaged, truncated, or not in the store's format.
        case corruptStore
        /// The file is a valid file of its kind but not a Concord store (another app's database).
        case notAStore
        /// The store was written with a schema that is not the one given and cannot be migrated
        /// to it (same version, different entities; a removed required attribute; a changed type).
        case incompatibleSchema
        /// The store was written with a newer schema version than the app has.
        case newerSchema
        /// No store plugin is registered under the requested type name.
        case unknownStoreType
        /// The store's files were deleted (by anyone) and it was torn down.
        case storeRemoved
        /// The store was closed or removed from its coordinator.
        case storeClosed
        /// A fetch or change that does not fit the schema.
        case invalidRequest
        /// A save whose records break the schema's rules; see ``PersistenceError/violations``.
        case validationFailed
        /// A deletion refused by a `deny` delete rule.
        case deleteDenied
        /// No store of the coordinator holds records of an entity.
        case noStore
        /// Reading or writing the store's files failed.
        case ioFailed
        /// The store was opened read-only.
        case readOnly
        /// The store's folder or files cannot be written (a read-only file system, missing
        /// permission, a full disk): ``PersistenceError/url`` names the folder or file, the
        /// message the errno and what to do, and ``PersistenceError/underlying`` is the
        /// `POSIXError`.
        case notWritable
    }

    /// The kind of failure.
    public var code: Code
    /// The file concerned, if one is.
    public var url: URL?
    /// What went wrong, in words.
    public var message: String
    /// The validation rules a failed save broke (``Code/validationFailed``).
    public var violations: [ValidationViolation]
    /// The error that caused this one, if any.
    public var underlying: (any Error & Sendable)?
    /// A finer reason within ``code``, when one is known (``Reason/duplicateID``, say).
    public var reason: Reason?

    /// An error.
    public init(
        _ code: Code,
        _ message: String,
        url: URL? = nil,
        violations: [ValidationViolation] = [],
        underlying: (any Error & Sendable)? = nil,
        reason: Reason? = nil
    ) {
        self.code = code
        self.url = url
        self.message = message
        self.violations = violations
        self.underlying = underlying
        self.reason = reason
    }

    /// `code: message (path) [underlying]`.
    public var description: String {
        var text = "\(code.rawValue): \(message)"
        if let url { text += " (\(url.path))" }
        if !violations.isEmpty { text += "; " + violations.map(\.description).joined(separator: "; ") }
        if let underlying { text += " [\(underlying)]" }
        return text
    }
}

extension PersistenceError {
    /// A finer reason within a ``Code``, as swift-nio's error codes are: a struct whose values
    /// are static members, so new reasons are added without breaking an adopter's `switch` over
    /// ``Code``. Compare with `==` (`error.reason == .duplicateID`).
    public struct Reason: Hashable, Sendable, CustomStringConvertible {
        /// The reason's stable name.
        public let name: String

        /// A reason named `name`.
        public init(_ name: String) { self.name = name }

        /// The name.
        public var description: String { name }

        /// A local insert of a record whose id the store already holds (code
        /// ``Code/invalidRequest``): an insert never replaces a record silently.
        public static let duplicateID = Reason("duplicateID")

        /// A commit whose outcome is not known (code ``Code/ioFailed``): the store reports it
        /// failed, but what it wrote may come back after a crash. Reopen the store and check
        /// before repeating the change.
        public static let commitUnconfirmed = Reason("commitUnconfirmed")

        /// No randomness could be had for a new id (code ``Code/ioFailed``): the kernel's
        /// `getrandom(2)` failed, named by the ``PersistenceError/underlying`` error. Nothing
        /// was changed; an id made without randomness could silently replace a record.
        public static let noRandomness = Reason("noRandomness")
    }
}
