import ConcordTestSupport
import FolderSync
import Foundation
import JSONStore
import Persistence
import SQLiteStore
import SyncTestKit
import Testing

/// Two real processes (the helper's `sync-edit`), one with an SQLite store and one with a JSON
/// store, share one container directory and sync live (exports after each save, imports on
/// inotify events) while both edit at random; once both are done and each has applied every log
/// of the other, the two stores hold the same records.
@Suite("Live sync between two processes converges", .serialized)
struct MultiProcessSyncTests {
    let directory = TemporaryDirectory("multi-process-sync")

    /// The one schema; the helpers read it from the JSON file the test writes.
    static let schema = SyncSimulator.schema

    static let registry: StoreRegistry = {
        let registry = StoreRegistry()
        registry.register(JSONStore.self)
        registry.register(SQLiteStore.self)
        return registry
    }()

    /// Edits per process (`CONCORD_SYNC_EDITS` overrides).
    static var edits: Int { ProcessInfo.processInfo.environment["CONCORD_SYNC_EDITS"].flatMap(Int.init) ?? 150 }

    @Test(
        "an SQLite process and a JSON process editing concurrently end with identical stores",
        arguments: [1, 2] as [UInt64]
    )
    func concurrentEditsConverge(seed: UInt64) throws {
        let schemaFile = directory("schema.json")
        try JSONEncoder().encode(Self.schema).write(to: schemaFile)
        let container = directory.makeDirectory("container")
        let status = directory.makeDirectory("status")
        let sides = [("sqlite", "alpha", "beta", "a.sqlite"), ("json", "beta", "alpha", "b.json")]
        var children: [ChildProcess] = []
        for (index, side) in sides.enumerated() {
            let child = try ChildProcess(
                [
                    "sync-edit", side.0, schemaFile.path, directory(side.3).path, container.path, side.1, side.2,
                    status.path,
                    String(seed &* 7919 &+ UInt64(index)), String(Self.edits),
                ],
                environment: ["CONCORD_DEBUG": "0"]
            )
            children.append(child)
        }
        for (child, side) in zip(children, sides) {
            #expect(child.waitForLine("ready", timeout: .seconds(30)), "\(side.1) did not start")
        }
        for (child, side) in zip(children, sides) {
            var lines: [String] = []
            var synced = false
            while let line = child.readLine(timeout: .seconds(150)) {
                lines.append(line)
                if line == "synced" {
                    synced = true
                    break
                }
            }
            #expect(synced, "\(side.1) did not converge; it said: \(lines.suffix(20))")
            #expect(lines.contains { $0.hasPrefix("done ") }, "\(side.1) never finished editing")
            let failures = lines.filter { $0.hasPrefix("save-failed") }
            #expect(failures.count <= Self.edits / 10, "\(side.1): too many failed saves: \(failures.prefix(5))")
        }
        for (child, side) in zip(children, sides) {
            #expect(child.waitForExit(timeout: .seconds(30)) == 0, "\(side.1) failed")
        }

        // What sync carries (attributes and owning relationships) must be identical.
        let first = try contents(type: "sqlite", at: directory(sides[0].3), derived: false)
        let second = try contents(type: "json", at: directory(sides[1].3), derived: false)
        #expect(first.count > 10, "the edits should leave records behind")
        let differences = Self.differences(first, second)
        #expect(
            differences.isEmpty,
            "stores differ in \(differences.count) record(s):\n\(differences.prefix(20).joined(separator: "\n"))\nrecords they name:\n\(Self.related(differences, first, second).joined(separator: "\n"))"
        )
        // Derived (inverse) sides are kept by each store from its owners; they must agree too.
        let withDerived = (
            try contents(type: "sqlite", at: directory(sides[0].3)),
            try contents(type: "json", at: directory(sides[1].3))
        )
        let derivedDifferences = Self.differences(withDerived.0, withDerived.1)
        #expect(
            derivedDifferences.isEmpty,
            "derived sides differ in \(derivedDifferences.count) record(s):\n\(derivedDifferences.prefix(20).joined(separator: "\n"))\nrecords they name:\n\(Self.related(derivedDifferences, withDerived.0, withDerived.1).joined(separator: "\n"))"
        )
    }

    /// Every record of the store, by id, normalized: every attribute (null when missing), every
    /// relationship (empty to-many sets as none; derived sides only when `derived`).
    func contents(type: String, at url: URL, derived: Bool = true) throws -> [ObjectID: String] {
        let store = try Self.registry.storeType(named: type).init(
            url: url,
            schema: Self.schema,
            options: StoreOptions(presentsFiles: false)
        )
        defer { store.close() }
        var result: [ObjectID: String] = [:]
        for entity in Self.schema.entities {
            for record in try store.fetch(FetchRequest(entity: entity.name)) {
                var fields: [String] = []
                for attribute in entity.attributes { fields.append("\(attribute.name)=\(record[attribute.name])") }
                for relationship in entity.relationships
                where derived || Self.schema.ownsRelationship(entity: entity.name, relationship.name) {
                    if relationship.isToMany {
                        let targets = (record.toMany[relationship.name] ?? []).sorted().map(\.description)
                        fields.append("\(relationship.name)=[\(targets.joined(separator: ","))]")
                    } else {
                        fields.append("\(relationship.name)=\(record.toOne[relationship.name]?.description ?? "nil")")
                    }
                }
                result[record.id] = fields.joined(separator: " ")
            }
        }
        return result
    }

    /// Both sides of every record the differing lines name, so a diff shows the owners too.
    static func related(_ differences: [String], _ first: [ObjectID: String], _ second: [ObjectID: String]) -> [String]
    {
        let text = differences.joined(separator: " ")
        return Set(first.keys).union(second.keys).sorted().filter { text.contains($0.description) }.prefix(40).map {
            id in
            "\(id):\n  sqlite \(first[id] ?? "(none)")\n  json   \(second[id] ?? "(none)")"
        }
    }

    /// One line per record that is missing on one side or different.
    static func differences(_ first: [ObjectID: String], _ second: [ObjectID: String]) -> [String] {
        Set(first.keys).union(second.keys).sorted().compactMap { id in
            switch (first[id], second[id]) {
            case (let a?, let b?) where a == b: return nil
            case (let a?, let b?):
                return "\(id): sqlite \(a)\n\(String(repeating: " ", count: id.description.count))  json   \(b)"
            case (let a?, nil): return "\(id): only in sqlite: \(a)"
            case (nil, let b?): return "\(id): only in json: \(b)"
            case (nil, nil): return nil
            }
        }
    }
}
