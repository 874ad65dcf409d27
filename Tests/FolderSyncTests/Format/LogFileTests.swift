import ConcordTestSupport
import Foundation
import Testing

@testable import FolderSync

@Suite("Log files: format, damage, naming, writing")
struct LogFileTests {
    static let sample = LogFile(
        device: "device-A",
        sequence: 7,
        schemaVersion: 3,
        created: Date(timeIntervalSinceReferenceDate: 812_345_678.123_456_7),
        payload: Data("hello, log".utf8)
    )
    static let url = URL(fileURLWithPath: "/container/store/devices/device-A/0000000000000007.cclog")

    /// The code `decode` throws for `data`, or `nil` if it decodes.
    static func failure(_ data: Data) -> SyncError.Code? {
        do {
            _ = try LogFile.decode(data, url: url)
            return nil
        } catch {
            #expect(error.url == url)
            return error.code
        }
    }

    /// `bytes` with the last four bytes replaced by the checksum of the rest.
    static func resealed(_ bytes: [UInt8]) -> Data {
        var body = Array(bytes.dropLast(4))
        let crc = CRC32C.checksum(body)
        body += [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]
        return Data(body)
    }

    // MARK: - Format

    @Test func crc32cMatchesTheStandardCheckValue() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([]) == 0)
    }

    @Test("CRC-32C agrees with the bit-by-bit definition at every length and however the bytes are split")
    func crc32cMatchesTheDefinition() {
        func reference(_ bytes: [UInt8]) -> UInt32 {
            var crc: UInt32 = 0xFFFF_FFFF
            for byte in bytes {
                crc ^= UInt32(byte)
                for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            }
            return crc ^ 0xFFFF_FFFF
        }
        var random = SystemRandomNumberGenerator()
        for length in 0..<200 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            let whole = CRC32C.checksum(bytes)
            #expect(whole == reference(bytes), "length \(length)")
            let split = Int.random(in: 0...length, using: &random)
            let running = bytes.withUnsafeBytes { raw in
                CRC32C.update(
                    CRC32C.update(CRC32C.initial, UnsafeRawBufferPointer(rebasing: raw[..<split])),
                    UnsafeRawBufferPointer(rebasing: raw[split...])
                )
            }
            #expect(CRC32C.finalize(running) == whole, "length \(length) split at \(split)")
        }
    }

    @Test func roundTrip() throws {
        let logs = [
            Self.sample,
            LogFile(device: "x", sequence: 1, schemaVersion: 0, created: .distantPast, payload: Data()),
            LogFile(
                device: String(repeating: "d", count: 64),
                sequence: .max,
                schemaVersion: -5,
                created: Date(timeIntervalSince1970: 1_900_000_000.987654321),
                payload: Data((0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }),
                container: String(repeating: "c", count: LogFile.maximumContainerLength)
            ),
            LogFile(
                device: "y",
                sequence: 2,
                schemaVersion: 1,
                created: .distantFuture,
                payload: Data("x".utf8),
                container: "7C8E1F0A-2B3C-4D5E-8F90-1A2B3C4D5E6F"
            ),
            // Format 3, as earlier versions wrote it: no container.
            LogFile(
                device: "z",
                sequence: 3,
                schemaVersion: 2,
                created: .now,
                payload: Data("y".utf8),
                formatVersion: 3
            ),
        ]
        for log in logs {
            let encoded = log.encoded()
            #expect(encoded.starts(with: Data("CONCORD-LOG\n".utf8)))
            let container = log.formatVersion >= 4 ? 1 + (log.container?.utf8.count ?? 0) : 0
            #expect(encoded.count == LogFile.fixedSize + log.device.utf8.count + container + log.payload.count)
            #expect(try LogFile.decode(encoded, url: Self.url) == log)
        }
        // Format 3 has no room for the container: it is not written.
        var older = Self.sample
        older.formatVersion = 3
        older.container = "7C8E1F0A"
        #expect(try LogFile.decode(older.encoded(), url: Self.url).container == nil)
    }

    @Test func decodesASliceThatDoesNotStartAtZero() throws {
        let padded = Data([1, 2, 3]) + Self.sample.encoded()
        #expect(try LogFile.decode(padded.dropFirst(3), url: Self.url) == Self.sample)
    }

    @Test func theHeaderIsLaidOutAsDocumented() {
        let bytes = [UInt8](Self.sample.encoded())
        #expect(bytes[12..<14] == [0, UInt8(LogFile.formatVersion)])  // the newest format version
        #expect(bytes[14..<16] == [0, UInt8(1 + 8 + 32 + 1)])  // header length
        #expect(bytes[16] == 8)  // device id length
        #expect(Array(bytes[17..<25]) == Array("device-A".utf8))
        #expect(bytes[25..<33] == [0, 0, 0, 0, 0, 0, 0, 7])  // sequence
        #expect(bytes[33..<41] == [0, 0, 0, 0, 0, 0, 0, 3])  // schema version
        #expect(bytes[49..<57] == [0, 0, 0, 0, 0, 0, 0, 10])  // payload length
        #expect(bytes[57] == 0)  // no container
        #expect(Array(bytes[58..<68]) == Array("hello, log".utf8))
        var stamped = Self.sample
        stamped.container = "C-1"
        let withContainer = [UInt8](stamped.encoded())
        let headerLength: UInt8 = 1 + 8 + 32 + 1 + 3
        #expect(withContainer[14..<16] == [0, headerLength])
        #expect(withContainer[57] == 3)  // container length
        #expect(Array(withContainer[58..<61]) == Array("C-1".utf8))
        #expect(Array(withContainer[61..<71]) == Array("hello, log".utf8))
    }

    // MARK: - Damage

    @Test func everyFlippedByteIsATypedError() {
        let bytes = [UInt8](Self.sample.encoded())
        for index in bytes.indices {
            for mask: UInt8 in [0x01, 0x80, 0xFF] {
                var damaged = bytes
                damaged[index] ^= mask
                let code = Self.failure(Data(damaged))
                #expect(
                    code == .corruptLog || code == .truncatedLog,
                    "byte \(index) ^ \(mask): \(String(describing: code))"
                )
            }
        }
    }

    @Test func everyTruncationIsTruncated() {
        let bytes = Self.sample.encoded()
        for length in 0..<bytes.count {
            #expect(Self.failure(bytes.prefix(length)) == .truncatedLog, "length \(length)")
        }
    }

    @Test func trailingBytesAreCorrupt() {
        #expect(Self.failure(Self.sample.encoded() + Data([0])) == .corruptLog)
    }

    @Test func notALogIsCorrupt() {
        #expect(Self.failure(Data("hello".utf8)) == .corruptLog)
        #expect(Self.failure(Data("SQLite format 3\0 and then some more bytes".utf8)) == .corruptLog)
        #expect(Self.failure(Data(repeating: 0, count: 4096)) == .corruptLog)
    }

    @Test func aFutureFormatVersionIsUnsupportedWhenIntact() {
        var bytes = [UInt8](Self.sample.encoded())
        bytes[13] = UInt8(LogFile.newestReadableVersion + 1)
        #expect(Self.failure(Self.resealed(bytes)) == .unsupportedLogVersion)
        // A future version whose checksum does not hold is damaged, not newer.
        #expect(Self.failure(Data(bytes)) == .corruptLog)
        // A future format may lay out its header differently: only magic, version and checksum count.
        let future = Array("CONCORD-LOG\n".utf8) + [0xFF, 0xFF] + Array("anything at all".utf8) + [0, 0, 0, 0]
        #expect(Self.failure(Self.resealed(future)) == .unsupportedLogVersion)
        var zero = bytes
        zero[13] = 0
        #expect(Self.failure(Self.resealed(zero)) == .corruptLog)
    }

    @Test func absurdLengthsAreCorruptNotAllocated() {
        let bytes = [UInt8](Self.sample.encoded())
        var huge = bytes
        for index in 49..<57 { huge[index] = 0xFF }  // payload length UInt64.max
        #expect(Self.failure(Self.resealed(huge)) == .corruptLog)
        var justOver = bytes
        let over = UInt64(LogFile.maximumPayloadSize + 1)
        for (offset, index) in (49..<57).enumerated() {
            justOver[index] = UInt8(truncatingIfNeeded: over >> (56 - 8 * offset))
        }
        #expect(Self.failure(Self.resealed(justOver)) == .corruptLog)
        var header = bytes
        header[14] = 0xFF  // header length 65_000-odd
        #expect(Self.failure(Self.resealed(header)) == .corruptLog)
        var device = bytes
        device[16] = 9  // device length that disagrees with the header length
        #expect(Self.failure(Self.resealed(device)) == .corruptLog)
        var container = bytes
        container[57] = 1  // a container length that disagrees with the header length
        #expect(Self.failure(Self.resealed(container)) == .corruptLog)
    }

    @Test func intactFilesWithInvalidFieldsAreCorrupt() {
        let badDevice = LogFile(device: ".hidden", sequence: 1, schemaVersion: 1, created: .now, payload: Data())
        #expect(Self.failure(badDevice.encoded()) == .corruptLog)
        let zero = LogFile(device: "a", sequence: 0, schemaVersion: 1, created: .now, payload: Data())
        #expect(Self.failure(zero.encoded()) == .corruptLog)
        let nan = LogFile(
            device: "a",
            sequence: 1,
            schemaVersion: 1,
            created: Date(timeIntervalSinceReferenceDate: .nan),
            payload: Data()
        )
        #expect(Self.failure(nan.encoded()) == .corruptLog)
        #expect(badDevice.invalidity != nil && zero.invalidity != nil && nan.invalidity != nil)
        for container in ["has space", "é", String(repeating: "c", count: LogFile.maximumContainerLength + 1)] {
            var log = Self.sample
            log.container = container
            #expect(log.invalidity != nil, "\(container)")
            #expect(Self.failure(log.encoded()) == .corruptLog, "\(container)")
        }
        var empty = Self.sample
        empty.container = ""
        #expect(empty.invalidity != nil, "an empty container is written as none")
        #expect(Self.sample.invalidity == nil)
    }

    // MARK: - Naming

    static let names: [(String, ContainerLayout.EntryKind)] = [
        ("0000000000000007.cclog", .log(sequence: 7)),
        ("0000000000000001.cclog", .log(sequence: 1)),
        ("9999999999999999.cclog", .log(sequence: 9_999_999_999_999_999)),
        ("18446744073709551615.cclog", .log(sequence: .max)),
        ("0000000000000000.cclog", .other),  // sequences start at 1
        ("7.cclog", .other),  // not padded
        ("00000000000000007.cclog", .other),  // over-padded
        ("000000000000000x.cclog", .other),
        ("0000000000000007.CCLOG", .other),
        ("0000000000000007.cclog.bak", .other),
        ("notes.txt", .other),
        (".stfolder", .other),
        // Ours and FileCoordination's.
        (".0000000000000007.cclog.123456.concord-tmp", .temporary),
        // Syncthing.
        (".syncthing.0000000000000007.cclog.tmp", .temporary),
        ("~syncthing~0000000000000007.cclog.tmp", .temporary),
        // Dropbox.
        (".~0000000000000007.cclog", .temporary),
        ("0000000000000007.cclog.dropbox", .temporary),
        (".dropbox.cache", .temporary),
        // rclone.
        ("0000000000000007.cclog.partial", .temporary),
        (".0000000000000007.cclog.partial", .temporary),
        ("0000000000000007.cclog.6a1b2c3d.partial", .temporary),
        // NFS.
        (".nfs0000000000a1b2c300000004", .temporary),
        // unison (`.unison.NAME.HASH.unison.tmp`: prefix `.unison`, suffix `.unison.tmp`, bcpierce00/unison#447).
        (".unison.0000000000000007.cclog.bd4c2f.unison.tmp", .temporary),
        // rsync (`.NAME.XXXXXX` while receiving; also of a copied Concord temporary).
        (".0000000000000007.cclog.Ab3xYz", .temporary),
        (".applied.json.q1W2e3", .temporary),
        ("..0000000000000007.cclog.42.concord-tmp.Zz9yX8", .temporary),
        (".0000000000000007.cclog.Ab3x", .other),
        // Syncthing conflict copies.
        ("0000000000000007.sync-conflict-20261122-101010-ABCDEFG.cclog", .conflictCopy(of: 7)),
        ("0000000000000012.sync-conflict-20250101-000000-7QZ3KXJ.cclog", .conflictCopy(of: 12)),
        ("0000000000000007.sync-conflict-2026112-101010-ABCDEFG.cclog", .other),
        ("0000000000000007.sync-conflict-20261122-101010-.cclog", .other),
        ("7.sync-conflict-20261122-101010-ABCDEFG.cclog", .other),
        // Dropbox and Nextcloud conflict copies.
        ("0000000000000007 (conflicted copy 2026-11-22).cclog", .conflictCopy(of: 7)),
        ("0000000000000007 (Someone's conflicted copy 2026-11-22).cclog", .conflictCopy(of: 7)),
        ("0000000000000007 (Someone's conflicted copy 2026-11-22 (1)).cclog", .conflictCopy(of: 7)),
        ("0000000000000007 (conflicted copy 2026-11-22 101010).cclog", .conflictCopy(of: 7)),
        ("0000000000000007 (copy).cclog", .other),
        // rclone bisync.
        ("0000000000000007.conflict1.cclog", .conflictCopy(of: 7)),
        ("0000000000000007.cclog..path2", .conflictCopy(of: 7)),
        ("0000000000000007.conflict.cclog", .other),
    ]

    @Test(arguments: names)
    func classification(name: String, kind: ContainerLayout.EntryKind) {
        #expect(ContainerLayout.classify(fileName: name) == kind)
    }

    @Test("the doctor names whose temporary a file is: Concord's, or the engine's by name")
    func temporaryOwners() {
        let owners = [
            ".0000000000000007.cclog.17.concord-tmp": "Concord",
            ".unison.0000000000000007.cclog.bd4c2f.unison.tmp": "unison",
            ".0000000000000007.cclog.Ab3xYz": "rsync",
            "..0000000000000007.cclog.42.concord-tmp.Zz9yX8": "rsync",
            ".syncthing.0000000000000007.cclog.tmp": "Syncthing",
            "0000000000000007.cclog.partial": "rclone",
        ]
        for (name, owner) in owners { #expect(ContainerLayout.temporaryOwner(name) == owner, "\(name)") }
        #expect(ContainerLayout.temporaryOwner("0000000000000007.cclog") == nil)
    }

    @Test func writerTemporariesAreClassifiedAsTemporary() {
        // The pattern the writer uses (see LogWriter.write), spelled from the same constants.
        let name = ".\(ContainerLayout.logFileName(sequence: 3)).\(UInt32.max)\(ContainerLayout.temporarySuffix)"
        #expect(ContainerLayout.classify(fileName: name) == .temporary)
    }

    @Test func layoutPathsAndNames() {
        let layout = ContainerLayout(container: URL(fileURLWithPath: "/c"), storeName: "Notes")
        #expect(layout.storeFolder.path == "/c/Notes")
        #expect(layout.devicesFolder.path == "/c/Notes/devices")
        #expect(layout.deviceFolder("A").path == "/c/Notes/devices/A")
        #expect(layout.logURL(device: "A", sequence: 42).path == "/c/Notes/devices/A/0000000000000042.cclog")
        #expect(ContainerLayout.logFileName(sequence: .max) == "18446744073709551615.cclog")
        let sorted = [1, 9, 10, 100, 99].map { ContainerLayout.logFileName(sequence: UInt64($0)) }.sorted()
        #expect(
            sorted.map { ContainerLayout.classify(fileName: $0) } == [1, 9, 10, 99, 100].map { .log(sequence: $0) }
        )
    }

    @Test(arguments: [
        ("A", true), ("device-1", true), ("MacBook.local_2", true), (String(repeating: "x", count: 64), true),
        ("", false), (".hidden", false), ("..", false), (String(repeating: "x", count: 65), false),
        ("a/b", false), ("a b", false), ("é", false), ("a\0b", false), ("~syncthing~", false),
    ])
    func deviceIDs(id: String, valid: Bool) {
        #expect(ContainerLayout.isValidDeviceID(id) == valid)
    }

    // MARK: - Writing

    static func log(_ device: String, _ sequence: UInt64, _ text: String = "payload") -> LogFile {
        LogFile(
            device: device,
            sequence: sequence,
            schemaVersion: 1,
            created: Date(timeIntervalSince1970: 1_800_000_000),
            payload: Data("\(text) \(device) \(sequence)".utf8)
        )
    }

    @Test func writerPlacesTheLogDurablyAndLeavesNoTemporary() throws {
        let directory = TemporaryDirectory()
        let layout = ContainerLayout(container: directory.url, storeName: "Store")
        let url = try LogWriter.write(Self.log("A", 1), layout: layout)
        #expect(url == layout.logURL(device: "A", sequence: 1))
        #expect(try LogFile.decode(Data(contentsOf: url), url: url) == Self.log("A", 1))
        try LogWriter.write(Self.log("A", 2), layout: layout)
        let names = try FileManager.default.contentsOfDirectory(atPath: layout.deviceFolder("A").path).sorted()
        #expect(names == ["0000000000000001.cclog", "0000000000000002.cclog"])
        #expect(try layout.logSequences(device: "A") == [1, 2])
        #expect(try layout.logSequences(device: "B") == [])
    }

    @Test func writerNeverReplacesALog() throws {
        let directory = TemporaryDirectory()
        let layout = ContainerLayout(container: directory.url, storeName: "Store")
        try LogWriter.write(Self.log("A", 1), layout: layout)
        // The same log again: a retried export succeeds.
        try LogWriter.write(Self.log("A", 1), layout: layout)
        // A different log under the same name is refused, and the original stays.
        #expect {
            try LogWriter.write(Self.log("A", 1, "other"), layout: layout)
        } throws: { ($0 as? SyncError)?.code == .logExists }
        let url = layout.logURL(device: "A", sequence: 1)
        #expect(try LogFile.decode(Data(contentsOf: url), url: url) == Self.log("A", 1))
        let names = try FileManager.default.contentsOfDirectory(atPath: layout.deviceFolder("A").path)
        #expect(names == ["0000000000000001.cclog"])
    }

    @Test func writerRefusesInvalidLogsAndMissingContainers() throws {
        let directory = TemporaryDirectory()
        let layout = ContainerLayout(container: directory.url, storeName: "Store")
        for bad in [Self.log("../escape", 1), Self.log("A", 0)] {
            #expect {
                try LogWriter.write(bad, layout: layout)
            } throws: { ($0 as? SyncError)?.code == .invalidLog }
        }
        let gone = ContainerLayout(container: directory("missing"), storeName: "Store")
        #expect {
            try LogWriter.write(Self.log("A", 1), layout: gone)
        } throws: { ($0 as? SyncError)?.code == .containerUnavailable }
        #expect(!FileManager.default.fileExists(atPath: directory("missing").path))
    }
}
