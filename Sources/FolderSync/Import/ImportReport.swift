import Foundation
import Persistence

/// What one import did.
public struct ImportReport: Sendable, Hashable {
    /// Logs applied.
    public var logs = 0
    /// Record changes applied (including those that lost to newer writes).
    public var changes = 0
    /// Files still arriving.
    public var waiting = 0
    /// Logs kept for a newer schema.
    public var gated = 0
    /// Devices whose next log cannot be applied yet: it is missing or damaged, or it waits for
    /// another device's log that is (causal delivery).
    public var blocked = 0
    /// How many log files the pass read: logs already applied are never read again, nor are
    /// logs that still wait (behind a gap, or for a dependency) and have not changed, so a pass
    /// that finds nothing new reads none.
    public var filesRead = 0
    /// How many logs the pass read a second time to apply them: the scan keeps what it read up
    /// to ``LogScanner/payloadBudget`` bytes, so only a larger backlog (or a log an earlier pass
    /// read and left waiting) is read again.
    public var logsReadAgain = 0
    /// Records two devices created under one id, both kept: the later one moved (see
    /// ``CreationConflict``).
    public var creationConflicts: [CreationConflict] = []
}
