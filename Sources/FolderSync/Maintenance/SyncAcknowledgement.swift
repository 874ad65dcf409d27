import ConcordSystem
import FileCoordination
import Foundation
import Persistence

/// What a device has applied, published in its own folder (`applied.json`) so that other
/// devices know which of their logs everyone has.
public struct SyncAcknowledgement: Codable, Sendable, Hashable {
    /// The device that published it.
    public var device: String
    /// For each device, the sequence number up to which (inclusive, without gaps) its logs
    /// are applied here. For the publishing device itself: its last exported log.
    public var applied: [String: UInt64]
    /// Set when the device left (``FolderSync/disable()``): compaction no longer waits for it,
    /// unless it registers again.
    public var left: Bool?
    /// The last log the device had committed (exported or still in its outbox) when it
    /// published this. `nil` in acknowledgements of older versions.
    public var committed: UInt64?
    /// The latest timestamp the device had made or seen when it published this: every log it
    /// commits later carries later timestamps. `nil` in acknowledgements of older versions.
    public var clock: SyncClock?
    /// The identity of the container the device had joined when it published this (as its logs
    /// carry it, ``LogFile/container``). An acknowledgement published for a container that
    /// another device has since replaced says nothing about the new one. `nil` in
    /// acknowledgements of older versions.
    public var container: String?

    /// An acknowledgement.
    public init(
        device: String,
        applied: [String: UInt64],
        left: Bool? = nil,
        committed: UInt64? = nil,
        clock: SyncClock? = nil,
        container: String? = nil
    ) {
        self.device = device
        self.applied = applied
        self.left = left
        self.committed = committed
        self.clock = clock
        self.container = container
    }
}
