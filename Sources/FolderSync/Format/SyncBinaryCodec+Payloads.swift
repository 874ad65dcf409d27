import Foundation
import Persistence

// MARK: - Payloads and clocks

extension SyncPayload {
    /// The first byte of a binary payload (a JSON payload starts with `{`).
    static let binaryMarker: UInt8 = 0xC2

    /// The payload as a log of `formatVersion` carries it: JSON in version 1, binary from 2.
    public func encoded(formatVersion: UInt16 = LogFile.formatVersion) throws -> Data {
        if formatVersion < 2 { return try JSONEncoder().encode(self) }
        var writer = BinaryWriter(reservingCapacity: 64 + changes.count * 96)
        writer.byte(Self.binaryMarker)
        // From format 3: the dependencies, before the changes.
        if formatVersion >= 3 { writer.sorted(dependencies) { $0.varint($1) } }
        writer.varint(UInt64(changes.count))
        for change in changes { writer.change(change) }
        // From format 6: the incarnations, after the changes, in id order.
        if formatVersion >= 6 {
            writer.varint(UInt64(incarnations.count))
            for (id, clock) in incarnations.sorted(by: { $0.key < $1.key }) {
                writer.objectID(id)
                writer.clock(clock)
            }
        }
        return Data(writer.bytes)
    }

    /// Only the dependencies of `log`'s payload (they come first): what causal delivery needs to
    /// order logs without decoding their changes. Logs before format 3 have none.
    package static func dependencies(of log: LogFile) throws -> [String: UInt64] {
        guard log.formatVersion >= 3 else { return [:] }
        var reader = BinaryReader(log.payload)
        guard try reader.byte() == binaryMarker else { throw BinaryCodecError("not a binary payload") }
        return try reader.dictionary { reader throws(BinaryCodecError) in try reader.varint() }
    }

    /// How many changes `log`'s payload carries, read without decoding them; `nil` when that
    /// takes decoding the whole payload (a JSON payload, format 1) or the payload is damaged.
    package static func changeCount(of log: LogFile) -> Int? {
        guard log.formatVersion >= 2 else { return nil }
        var reader = BinaryReader(log.payload)
        guard (try? reader.byte()) == binaryMarker else { return nil }
        if log.formatVersion >= 3 {
            guard (try? reader.dictionary { reader throws(BinaryCodecError) in try reader.varint() }) != nil else {
                return nil
            }
        }
        return try? reader.count(minimumSize: 20)
    }

    /// The payload of `log`, read as its format version says.
    ///
    /// - Throws: an error describing the damage when the payload cannot be read.
    public static func decode(from log: LogFile) throws -> SyncPayload {
        guard log.formatVersion >= 2 else { return try JSONDecoder().decode(SyncPayload.self, from: log.payload) }
        var reader = BinaryReader(log.payload)
        guard try reader.byte() == binaryMarker else { throw BinaryCodecError("not a binary payload") }
        let dependencies =
            log.formatVersion >= 3
            ? try reader.dictionary { reader throws(BinaryCodecError) in try reader.varint() } : [:]
        let count = try reader.count(minimumSize: 20)
        var changes: [SyncChange] = []
        changes.reserveCapacity(count)
        for _ in 0..<count { changes.append(try reader.change()) }
        var incarnations: [ObjectID: SyncClock] = [:]
        if log.formatVersion >= 6 {
            let entries = try reader.count(minimumSize: 20)
            incarnations.reserveCapacity(entries)
            for _ in 0..<entries {
                let id = try reader.objectID()
                incarnations[id] = try reader.clock()
            }
        }
        guard reader.isAtEnd else { throw BinaryCodecError("bytes after the last change") }
        return SyncPayload(changes: changes, dependencies: dependencies, incarnations: incarnations)
    }
}

extension RecordClocks {
    /// The first byte of clocks in binary (clocks kept as JSON before start with `{`).
    static let binaryMarker: UInt8 = 0xC3

    /// The clocks as a metadata entry keeps them.
    package func encoded() -> Data {
        var writer = BinaryWriter(reservingCapacity: 96)
        writer.byte(Self.binaryMarker)
        writer.clocks(self)
        return Data(writer.bytes)
    }

    /// Clocks from a metadata entry: binary, or JSON as earlier versions kept them.
    package static func decode(_ data: Data) throws -> RecordClocks {
        guard data.first == binaryMarker else { return try JSONDecoder().decode(RecordClocks.self, from: data) }
        var reader = BinaryReader([UInt8](data), from: 1)
        let clocks = try reader.clocks()
        guard reader.isAtEnd else { throw BinaryCodecError("bytes after the clocks") }
        return clocks
    }
}

extension BaselinePayload {
    /// The baseline as a file of `formatVersion` carries it: JSON in version 1, binary from 2.
    package func encoded(formatVersion: UInt16 = LogFile.formatVersion) throws -> Data {
        if formatVersion < 2 { return try JSONEncoder().encode(self) }
        var bytes = Self.encodedStart(covers: covers, changeCount: changes.count)
        var writer = BinaryWriter(reservingCapacity: 64 + changes.count * 96)
        for change in changes { writer.change(change) }
        bytes += writer.bytes
        bytes += try Self.encodedEnd(
            redirects: redirects,
            collectedThrough: collectedThrough,
            versions: versions,
            formatVersion: formatVersion
        )
        return Data(bytes)
    }

    /// What a binary baseline's payload starts with, before its `changeCount` changes.
    static func encodedStart(covers: [String: UInt64], changeCount: Int) -> [UInt8] {
        var writer = BinaryWriter()
        writer.byte(SyncPayload.binaryMarker)
        writer.sorted(covers) { $0.varint($1) }
        writer.varint(UInt64(changeCount))
        return writer.bytes
    }

    /// What a binary baseline's payload ends with, after its changes.
    static func encodedEnd(
        redirects: [String: String]?,
        collectedThrough: SyncClock?,
        versions: [String: LogVersions]? = nil,
        formatVersion: UInt16 = LogFile.formatVersion
    ) throws -> [UInt8] {
        var writer = BinaryWriter()
        // From format 5: the redirects, whether the horizon follows, the horizon, the versions.
        if formatVersion >= 5 {
            writer.sorted(redirects ?? [:]) { $0.string($1) }
            writer.optional(collectedThrough) { $0.clock($1) }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            writer.data(try encoder.encode(versions ?? [:]))
            return writer.bytes
        }
        // From format 3: the redirects, when there are any or when the horizon follows them.
        if formatVersion >= 3, !(redirects ?? [:]).isEmpty || collectedThrough != nil {
            writer.sorted(redirects ?? [:]) { $0.string($1) }
            if let collectedThrough { writer.clock(collectedThrough) }
        }
        return writer.bytes
    }

    /// The baseline in `file`, read as its format version says.
    package static func decode(from file: LogFile) throws -> BaselinePayload {
        guard file.formatVersion >= 2 else { return try JSONDecoder().decode(BaselinePayload.self, from: file.payload) }
        var reader = BinaryReader(file.payload)
        guard try reader.byte() == SyncPayload.binaryMarker else { throw BinaryCodecError("not a binary baseline") }
        let covers = try reader.dictionary { reader throws(BinaryCodecError) in try reader.varint() }
        let count = try reader.count(minimumSize: 20)
        var changes: [SyncChange] = []
        changes.reserveCapacity(count)
        for _ in 0..<count { changes.append(try reader.change()) }
        if file.formatVersion >= 5 {
            let end = try Self.decodeEnd(&reader)
            guard reader.isAtEnd else { throw BinaryCodecError("bytes after the last change") }
            return BaselinePayload(
                covers: covers,
                changes: changes,
                redirects: end.redirects,
                collectedThrough: end.collectedThrough,
                versions: end.versions
            )
        }
        // From format 3, the redirects of removed duplicates, when there are any.
        var redirects: [String: String]?
        if file.formatVersion >= 3, !reader.isAtEnd {
            let read = try reader.dictionary { reader throws(BinaryCodecError) in try reader.string() }
            redirects = read.isEmpty ? nil : read
        }
        // Then, when there is one, the newest history among the tombstones collected.
        let collectedThrough = file.formatVersion >= 3 && !reader.isAtEnd ? try reader.clock() : nil
        guard reader.isAtEnd else { throw BinaryCodecError("bytes after the last change") }
        return BaselinePayload(
            covers: covers,
            changes: changes,
            redirects: redirects,
            collectedThrough: collectedThrough
        )
    }
}

extension BaselinePayload {
    /// The most of each device's ``LogVersions`` a baseline's versions are read with: numbers
    /// leapt over (ranges), and logs met in several versions.
    static let versionsLimits = (voids: 64, digests: 4096)

    /// What a format 5 baseline's payload ends with, after its changes (see
    /// ``encodedEnd(redirects:collectedThrough:versions:formatVersion:)``).
    static func decodeEnd(
        _ reader: inout BinaryReader
    ) throws(BinaryCodecError) -> (
        redirects: [String: String]?, collectedThrough: SyncClock?, versions: [String: LogVersions]?
    ) {
        let redirects = try reader.dictionary { reader throws(BinaryCodecError) in try reader.string() }
        let collectedThrough = try reader.optional { reader throws(BinaryCodecError) in try reader.clock() }
        let data = try reader.data()
        let versions: [String: LogVersions]
        do {
            versions = try JSONDecoder().decode([String: LogVersions].self, from: data)
        } catch {
            throw BinaryCodecError("the versions it carries cannot be decoded: \(error)")
        }
        for (device, kept) in versions
        where kept.voids.count > versionsLimits.voids || kept.digests.count > versionsLimits.digests {
            throw BinaryCodecError("device \(device)'s versions hold more than a baseline may")
        }
        return (redirects.isEmpty ? nil : redirects, collectedThrough, versions.isEmpty ? nil : versions)
    }
}
