import Foundation
import Persistence

/// One log (or baseline) file decoded whole, header and changes, for tools that show what a
/// device wrote (`concord log`). Reading never writes anything.
public struct DecodedLogFile: Sendable {
    /// The file read.
    public var url: URL
    /// The header (device, sequence, schema version, creation date, format version); its payload
    /// is the raw bytes the changes were decoded from.
    public var log: LogFile
    /// Whether the file is a baseline (a snapshot folded from logs) rather than a log.
    public var isBaseline: Bool
    /// For a log: what its device had applied of other devices' logs when it wrote it.
    public var dependencies: [String: UInt64]
    /// For a baseline: the log positions it covers, per device.
    public var covers: [String: UInt64]
    /// The record changes, in order.
    public var changes: [SyncChange]
    /// For a log: the creation each record it writes or points at was known by
    /// (``SyncPayload/incarnations``; format 6 and later).
    public var incarnations: [ObjectID: SyncClock] = [:]

    /// Reads and decodes `url`: a log (`*.cclog`, or a sync engine's conflict copy of one) or a
    /// baseline (`baseline-*.ccbase`).
    ///
    /// - Throws: ``SyncError`` naming the file: ``SyncError/Code/ioFailed`` when it cannot be read,
    ///   ``SyncError/Code/truncatedLog``, ``SyncError/Code/corruptLog`` (the payload included) or
    ///   ``SyncError/Code/unsupportedLogVersion`` as ``LogFile/decode(_:url:)`` says.
    public static func read(_ url: URL) throws(SyncError) -> DecodedLogFile {
        let log = try ContainerDiagnosis.decodeLog(url).get()
        let isBaseline =
            url.lastPathComponent.hasPrefix(ContainerLayout.baselinePrefix)
            && url.pathExtension == ContainerLayout.baselineExtension
        do {
            if isBaseline {
                let payload = try BaselinePayload.decode(from: log)
                return DecodedLogFile(
                    url: url,
                    log: log,
                    isBaseline: true,
                    dependencies: [:],
                    covers: payload.covers,
                    changes: payload.changes
                )
            }
            let payload = try SyncPayload.decode(from: log)
            return DecodedLogFile(
                url: url,
                log: log,
                isBaseline: false,
                dependencies: payload.dependencies,
                covers: [:],
                changes: payload.changes,
                incarnations: payload.incarnations
            )
        } catch {
            throw SyncError(
                .corruptLog,
                "the header and checksum hold but the \(isBaseline ? "baseline" : "payload") cannot be read: \(error)",
                url: url
            )
        }
    }
}
