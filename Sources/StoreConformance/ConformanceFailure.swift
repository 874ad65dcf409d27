import Foundation

/// One way a store broke the `PersistentStore` contract: the check that noticed, the store
/// type, what was done, and what was expected next to what happened.
public struct ConformanceFailure: Error, Sendable, CustomStringConvertible {
    /// The name of the check (one of ``StoreConformance/checkNames``).
    public var check: String
    /// The store's type name.
    public var storeType: String
    /// What went wrong, in words (the step and the request or change concerned).
    public var message: String
    /// What the contract says should have happened, when that is a value.
    public var expected: String?
    /// What the store did instead.
    public var actual: String?

    /// A failure.
    public init(check: String, storeType: String, message: String, expected: String? = nil, actual: String? = nil) {
        self.check = check
        self.storeType = storeType
        self.message = message
        self.expected = expected
        self.actual = actual
    }

    /// `[storeType] check: message`, then the expected and actual values on lines of their own.
    public var description: String {
        var text = "[\(storeType)] \(check): \(message)"
        if let expected { text += "\n  expected: \(expected)" }
        if let actual { text += "\n  actual:   \(actual)" }
        return text
    }
}

/// Every failure of a ``StoreConformance/runAll()`` run, in the order of
/// ``StoreConformance/checkNames``.
public struct ConformanceFailures: Error, Sendable, CustomStringConvertible {
    /// The failures, one per failed check.
    public var failures: [ConformanceFailure]

    /// The failures.
    public init(_ failures: [ConformanceFailure]) { self.failures = failures }

    /// How many checks failed, then each failure.
    public var description: String {
        "\(failures.count) conformance check(s) failed:\n" + failures.map(\.description).joined(separator: "\n")
    }
}
