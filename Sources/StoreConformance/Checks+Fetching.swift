import Foundation
import Persistence

/// SplitMix64: a small, seeded generator, so a failing differential run is the same run every time.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func chance(_ probability: Double) -> Bool { Double.random(in: 0..<1, using: &self) < probability }

    mutating func pick<T>(_ values: [T]) -> T { values[Int.random(in: 0..<values.count, using: &self)] }

    mutating func uuid() -> UUID {
        let a = next()
        let b = next()
        return withUnsafeBytes(of: (a, b)) { UUID(uuid: $0.load(as: uuid_t.self)) }
    }
}

/// The value pools the differential check draws from: few values, so records tie and
/// predicates match.
enum DifferentialPools {
    static let texts: [String] = [
        "", "a", "A", "ab", "abc", "ABC", "Abc", "abd", "b", "ba", "é", "e\u{301}", "É", "Straße", "STRASSE", "naïve",
        "日本語", "日本",
        "🙂", "a🙂b", "z", "Z", "hello world", "Hello World", "%", "_", "a%b", "a_b", "'", "\"", "\\", "a\\b", "*", "[a]",
        "?",
    ]
    static let letters: [String] = ["a", "b", "A", "B", "é", "🙂", "%", "_", " "]
    static let numbers: [Int64] = [.min, -1_000_000, -1, 0, 1, 2, 3, 42, 1 << 53, 1 << 53 + 1, .max]
    static let amounts: [Double] = [
        -0.0, 0.0, 0.5, 1.0, 2.0, -1.5, 3.0, 42.0, 1e300, -1e300, .leastNonzeroMagnitude, 9_007_199_254_740_992, 0.1,
        -2.0,
    ]
    static let dates: [Date] = [
        Date(timeIntervalSinceReferenceDate: 123456.789012), Date(timeIntervalSinceReferenceDate: 123456.789013),
        Date(timeIntervalSince1970: 0), Date(timeIntervalSinceReferenceDate: -0.25),
        Date(timeIntervalSince1970: 1_700_000_000.5),
        Date(timeIntervalSinceReferenceDate: 0),
    ]
    static let blobs: [Data] = [
        Data(), Data([0]), Data([0, 0]), Data([0, 1]), Data([1]), Data([255]), Data([1, 2, 3]),
    ]
    static let keys: [UUID] = [
        UUID(uuidString: "00000000-0000-0000-0000-000000000000")!,
        UUID(uuidString: "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!,
        UUID(uuidString: "80000000-0000-0000-0000-000000000000")!,
        UUID(uuidString: "7FFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF")!,
        UUID(uuidString: "6C0A7E1B-9D34-4F52-8B1E-3C5F0D2A9E47")!,
    ]
    static let titles: [String] = ["untitled", "x", "y", "Y"]
}

extension Checks {
    /// A fresh value of `type` from the pools (or, now and then, from nowhere).
    static func randomValue(_ type: AttributeType, _ random: inout SeededGenerator) -> Value {
        switch type {
        case .string:
            if random.chance(0.7) { return .string(random.pick(DifferentialPools.texts)) }
            return .string(
                (0..<Int.random(in: 0...4, using: &random)).map { _ in random.pick(DifferentialPools.letters) }.joined()
            )
        case .integer:
            return .integer(
                random.chance(0.6) ? Int64.random(in: -3...3, using: &random) : random.pick(DifferentialPools.numbers)
            )
        case .double:
            return .double(random.pick(DifferentialPools.amounts))
        case .boolean:
            return .boolean(random.chance(0.5))
        case .date:
            return .date(random.pick(DifferentialPools.dates))
        case .data:
            return .data(random.pick(DifferentialPools.blobs))
        case .uuid:
            return .uuid(random.chance(0.8) ? random.pick(DifferentialPools.keys) : random.uuid())
        }
    }

    /// The seeded corpus: owners, labels, and items with random values (about a quarter null),
    /// consistent relationships.
    static func differentialCorpus(_ random: inout SeededGenerator, items count: Int) -> [Record] {
        let owners = (0..<12).map { index in
            Record(
                id: ObjectID(entity: "Owner", uuid: random.uuid()),
                values: ["name": .string(random.pick(DifferentialPools.texts)), "rank": .integer(Int64(index % 4))]
            )
        }
        let labels = (0..<8).map { _ in
            Record(
                id: ObjectID(entity: "Label", uuid: random.uuid()),
                values: ["name": .string(random.pick(DifferentialPools.titles))]
            )
        }
        var ownerItems: [ObjectID: Set<ObjectID>] = [:]
        var labelItems: [ObjectID: Set<ObjectID>] = [:]
        var items: [Record] = []
        for _ in 0..<count {
            var item = Record(id: ObjectID(entity: "Item", uuid: random.uuid()))
            for (name, type) in ConformanceSchema.itemAttributes where random.chance(0.75) {
                item[name] =
                    name == "title" ? .string(random.pick(DifferentialPools.titles)) : randomValue(type, &random)
            }
            if random.chance(0.7) {
                let owner = random.pick(owners).id
                item.toOne["owner"] = owner
                ownerItems[owner, default: []].insert(item.id)
            }
            for _ in 0..<Int.random(in: 0...3, using: &random) {
                let label = random.pick(labels).id
                item.toMany["labels", default: []].insert(label)
                labelItems[label, default: []].insert(item.id)
            }
            items.append(item)
        }
        return owners.map { owner in
            var owner = owner
            owner.toMany["items"] = ownerItems[owner.id]
            return owner
        }
            + labels.map { label in
                var label = label
                label.toMany["items"] = labelItems[label.id]
                return label
            } + items
    }

    /// A random predicate over `entity`, its constants drawn mostly from `corpus`'s values.
    static func randomPredicate(
        entity: EntityDescription,
        corpus: [Record],
        depth: Int,
        _ random: inout SeededGenerator
    ) -> RecordPredicate {
        let roll = Int.random(in: 0..<100, using: &random)
        let attribute = random.pick(entity.attributes)
        func constant(_ attribute: AttributeDescription) -> Value {
            if random.chance(0.1) { return .null }
            if random.chance(0.65) {
                let value = random.pick(corpus)[attribute.name]
                if attribute.type == .double, case .double(let number) = value, random.chance(0.3),
                    let integer = Int64(exactly: number.rounded(.down))
                {
                    return .integer(integer)
                }
                return value
            }
            if attribute.type == .double, random.chance(0.3) { return .integer(random.pick(DifferentialPools.numbers)) }
            return randomValue(attribute.type, &random)
        }
        switch roll {
        case 0..<3:
            return .constant(random.chance(0.5))
        case 3..<33:
            let comparison = random.pick([
                RecordPredicate.Comparison.equal, .notEqual, .less, .lessOrEqual, .greater, .greaterOrEqual,
            ])
            return .comparison(key: attribute.name, comparison, constant(attribute))
        case 33..<42:
            return .among(
                key: attribute.name,
                (0..<Int.random(in: 0...4, using: &random)).map { _ in constant(attribute) }
            )
        case 42..<62:
            let strings = entity.attributes.filter { $0.type == .string }
            let key = random.pick(strings).name
            var text: String
            if random.chance(0.6), case .string(let source) = random.pick(corpus)[key] {
                let scalars = Array(source.unicodeScalars)
                let start = Int.random(in: 0...scalars.count, using: &random)
                let end = Int.random(in: start...min(scalars.count, start + 4), using: &random)
                text = String(String.UnicodeScalarView(scalars[start..<end]))
            } else {
                text =
                    random.chance(0.5) ? random.pick(DifferentialPools.texts) : random.pick(DifferentialPools.letters)
            }
            let caseInsensitive = random.chance(0.5)
            if caseInsensitive, random.chance(0.5) {
                text = String(
                    text.map { character in
                        guard character.isASCII, random.chance(0.5) else { return character }
                        return character.isUppercase
                            ? Character(character.lowercased()) : Character(character.uppercased())
                    }
                )
            }
            return .text(
                key: key,
                random.pick([.beginsWith, .endsWith, .contains]),
                text,
                caseInsensitive: caseInsensitive
            )
        case 62..<72:
            guard !entity.relationships.isEmpty else { return .constant(true) }
            let relationship = random.pick(entity.relationships)
            if random.chance(0.2) { return .relationship(key: relationship.name, nil) }
            let targets = corpus.flatMap { record in
                (record.toOne[relationship.name].map { [$0] } ?? [])
                    + (record.toMany[relationship.name].map(Array.init) ?? [])
            }
            let target =
                targets.isEmpty || random.chance(0.1)
                ? ObjectID(entity: relationship.destination, uuid: random.uuid()) : random.pick(targets)
            return .relationship(key: relationship.name, target)
        case 72..<77:
            var ids = Set((0..<Int.random(in: 0...5, using: &random)).map { _ in random.pick(corpus).id })
            if random.chance(0.3) { ids.insert(ObjectID(entity: entity.name, uuid: random.uuid())) }
            if random.chance(0.2) { ids.insert(ObjectID(entity: "Owner", uuid: random.pick(DifferentialPools.keys))) }
            return .ids(ids)
        case 77..<82:
            if random.chance(0.1) {
                return .idAfter(
                    ObjectID(
                        entity: random.pick(["Item", "Owner", "Label", "A", "Z"]),
                        uuid: random.pick(DifferentialPools.keys)
                    )
                )
            }
            return .idAfter(
                random.chance(0.8) ? random.pick(corpus).id : ObjectID(entity: entity.name, uuid: random.uuid())
            )
        default:
            guard depth < 3 else { return .constant(true) }
            let children = (0..<Int.random(in: 0...3, using: &random)).map { _ in
                randomPredicate(entity: entity, corpus: corpus, depth: depth + 1, &random)
            }
            switch Int.random(in: 0..<3, using: &random) {
            case 0: return .and(children)
            case 1: return .or(children)
            default:
                return .not(
                    children.first ?? randomPredicate(entity: entity, corpus: corpus, depth: depth + 1, &random)
                )
            }
        }
    }

    static func differentialFetch(_ context: CheckContext) throws {
        context.distinguishesZeroSign = false
        var random = SeededGenerator(seed: 0xC0C0_4D5E_ED15_0001)
        let url = context.url()
        let store = try context.open(url)
        var model: [ObjectID: Record] = [:]
        let corpus = differentialCorpus(&random, items: 320)
        for chunk in stride(from: 0, to: corpus.count, by: 90) {
            let inserts = Array(corpus[chunk..<min(chunk + 90, corpus.count)])
            for record in inserts { model[record.id] = record }
            try context.commit(store, StoreChanges(inserts: inserts), "the differential corpus")
        }
        // Some updates (clearing values and setting new ones) and deletes, as a store's life has.
        let items = corpus.filter { $0.id.entity == "Item" }
        var updates: [RecordUpdate] = []
        for item in items.prefix(40) {
            let (name, type) = random.pick(ConformanceSchema.itemAttributes)
            updates.append(
                RecordUpdate(id: item.id, values: [name: random.chance(0.3) ? .null : randomValue(type, &random)])
            )
        }
        let deletes = items.suffix(20).map(\.id)
        for update in updates { model[update.id] = update.applied(to: model[update.id]!) }
        for id in deletes { model[id] = nil }
        try context.commit(store, StoreChanges(updates: updates, deletes: deletes), "updates and deletes of the corpus")
        try context.expectContents(store, Array(model.values), "after seeding the differential corpus")
        // The reference is evaluated over what the store gives back, so that a representation
        // that the round-trip checks allow (a date's last bits) cannot make a false difference.
        let stored = try context.allRecords(store)

        var mismatches: [String] = []
        var requests = 0
        for round in 0..<400 {
            let entityName = round % 10 == 9 ? "Owner" : "Item"
            let entity = ConformanceSchema.v1.entity(entityName)!
            let ofEntity = stored.filter { $0.id.entity == entityName }
            let predicate = randomPredicate(entity: entity, corpus: ofEntity, depth: 0, &random)
            let sorts = (0..<Int.random(in: 0...3, using: &random)).map { _ in
                RecordSort(random.pick(entity.attributes).name, ascending: random.chance(0.5))
            }
            let limit: Int? = random.chance(0.5) ? nil : Int.random(in: 0...40, using: &random)
            let offset = random.chance(0.6) ? 0 : Int.random(in: 0...(ofEntity.count + 10), using: &random)
            let request = FetchRequest(
                entity: entityName,
                predicate: predicate,
                sortedBy: sorts,
                limit: limit,
                offset: offset
            )
            requests += 1
            let expected = request.evaluate(over: stored)
            let actual: [Record]
            do {
                actual = try store.fetch(request)
            } catch {
                mismatches.append("fetch threw \(error)\n    request: \(describe(request))")
                continue
            }
            if expected.map(\.id) != actual.map(\.id) {
                mismatches.append(describeMismatch(request, expected: expected, actual: actual))
            } else if let difference = RecordComparison.difference(expected: expected, actual: actual) {
                mismatches.append(
                    "the records' contents differ from a full fetch's: \(difference)\n    request: \(describe(request))"
                )
            }
            var unpaged = request
            unpaged.fetchLimit = nil
            unpaged.fetchOffset = 0
            let expectedCount = unpaged.evaluate(over: stored).count
            do {
                let count = try store.count(for: request)
                if count != expectedCount {
                    mismatches.append(
                        "count(for:) is \(count), expected \(expectedCount) (limit and offset ignored)\n    request: \(describe(request))"
                    )
                }
            } catch {
                mismatches.append("count(for:) threw \(error)\n    request: \(describe(request))")
            }
        }
        store.close()
        if !mismatches.isEmpty {
            throw context.failure(
                "\(mismatches.count) of \(requests * 2) fetches and counts differ from FetchRequest.evaluate(over:); the first ones:\n  "
                    + mismatches.prefix(4).joined(separator: "\n  ")
            )
        }
    }

    static func describe(_ request: FetchRequest) -> String {
        var text = "\(request.entity) where \(describe(request.predicate))"
        if !request.sortDescriptors.isEmpty {
            text +=
                " sorted by "
                + request.sortDescriptors.map { "\($0.key) \($0.ascending ? "ascending" : "descending")" }.joined(
                    separator: ", "
                )
        }
        if let limit = request.fetchLimit { text += " limit \(limit)" }
        if request.fetchOffset != 0 { text += " offset \(request.fetchOffset)" }
        return text
    }

    static func describe(_ predicate: RecordPredicate) -> String {
        switch predicate {
        case .constant(let value): return "\(value)"
        case .comparison(let key, let comparison, let value):
            return "\(key) \(comparison.rawValue) \(RecordComparison.describe(value))"
        case .among(let key, let values):
            return "\(key) in [\(values.map(RecordComparison.describe).joined(separator: ", "))]"
        case .text(let key, let match, let text, let caseInsensitive):
            return "\(key) \(match.rawValue)\(caseInsensitive ? "[c]" : "") \(RecordComparison.describe(.string(text)))"
        case .relationship(let key, let target): return "\(key) refers to \(target.map(\.description) ?? "nothing")"
        case .ids(let ids): return "id in \(RecordComparison.describe(ids))"
        case .idAfter(let id): return "id after \(id)"
        case .and(let predicates):
            return "(" + (predicates.isEmpty ? "and of nothing" : predicates.map(describe).joined(separator: " and "))
                + ")"
        case .or(let predicates):
            return "(" + (predicates.isEmpty ? "or of nothing" : predicates.map(describe).joined(separator: " or "))
                + ")"
        case .not(let predicate): return "not \(describe(predicate))"
        }
    }

    static func describeMismatch(_ request: FetchRequest, expected: [Record], actual: [Record]) -> String {
        let expectedIDs = expected.map(\.id)
        let actualIDs = actual.map(\.id)
        var text = "fetched \(actual.count) record(s), expected \(expected.count)\n    request: \(describe(request))"
        let missing = expected.filter { !Set(actualIDs).contains($0.id) }
        let extra = actual.filter { !Set(expectedIDs).contains($0.id) }
        if let first = missing.first {
            text += "\n    missing (\(missing.count)), e.g. \(RecordComparison.describe(first))"
        }
        if let first = extra.first {
            text += "\n    not expected (\(extra.count)), e.g. \(RecordComparison.describe(first))"
        }
        if missing.isEmpty && extra.isEmpty,
            let index = expectedIDs.indices.first(where: { expectedIDs[$0] != actualIDs[$0] })
        {
            text +=
                "\n    same records in another order; first difference at position \(index): expected \(RecordComparison.describe(expected[index])), got \(RecordComparison.describe(actual[index]))"
        }
        return text
    }

    static func recordsWithIDs(_ context: CheckContext) throws {
        let records = relatedRecords()
        let store = try context.open(context.url())
        try context.commit(store, StoreChanges(inserts: records), "related records")
        let some = records.filter { $0.id.entity != "Label" }.prefix(5)
        let cases: [(String, [ObjectID], [Record])] = [
            ("no ids", [], []),
            ("every id", records.map(\.id), records),
            (
                "ids of several entities, some held, some not",
                some.map(\.id) + [
                    .deterministic(entity: "Item", name: "absent"), .deterministic(entity: "Owner", name: "absent"),
                ], Array(some)
            ),
            ("a held id under another entity's name", [ObjectID(entity: "Label", uuid: records[0].id.uuid)], []),
        ]
        for (what, ids, expected) in cases {
            let actual = try context.step("records(with:) for \(what)") { try store.records(with: ids) }
            if let difference = RecordComparison.difference(expected: expected, actual: actual) {
                throw context.failure("records(with:) for \(what) differs:\n    \(difference)")
            }
        }
        store.close()
    }

    static func enumerateRecords(_ context: CheckContext) throws {
        context.distinguishesZeroSign = false
        var random = SeededGenerator(seed: 7)
        let records = differentialCorpus(&random, items: 250)
        let store = try context.open(context.url())
        try context.commit(store, StoreChanges(inserts: records), "records to enumerate")
        for entity in ConformanceSchema.entityNames {
            let expected = records.filter { $0.id.entity == entity }.sorted { $0.id < $1.id }
            for batchSize in [1, 7, 100, 1000] where batchSize > 1 || expected.count < 100 {
                var seen: [Record] = []
                var batches = 0
                try context.step("enumerating \(entity) in batches of \(batchSize)") {
                    try store.enumerateRecords(of: entity, batchSize: batchSize) { batch in
                        batches += 1
                        if batch.count > batchSize {
                            throw context.failure(
                                "enumerateRecords handed over \(batch.count) records in a batch of \(batchSize)"
                            )
                        }
                        seen += batch
                    }
                }
                try context.expect(
                    seen.map(\.id) == expected.map(\.id),
                    "enumerating \(entity) in batches of \(batchSize) did not give every record once in id order",
                    expected: "\(expected.count) records",
                    actual: "\(seen.count) records, \(Set(seen.map(\.id)).count) distinct, in \(batches) batches"
                )
                if let difference = RecordComparison.difference(expected: expected, actual: seen, zeroSign: false) {
                    throw context.failure("enumerated \(entity) records differ:\n    \(difference)")
                }
            }
        }
        store.close()
    }

    static func invalidRequests(_ context: CheckContext) throws {
        let store = try context.open(context.url())
        try context.commit(store, StoreChanges(inserts: relatedRecords()), "related records")
        let label = ObjectID.deterministic(entity: "Label", name: "l1")
        let requests: [(String, FetchRequest)] = [
            ("an unknown entity", FetchRequest(entity: "Nope")),
            ("a predicate on an unknown attribute", FetchRequest(entity: "Item", predicate: Field("nope") == "x")),
            (
                "a string compared with an integer attribute",
                FetchRequest(entity: "Item", predicate: Field("number") == "x")
            ),
            (
                "a double compared with an integer attribute",
                FetchRequest(entity: "Item", predicate: Field("number") < 1.5)
            ),
            (
                "a date among integer values",
                FetchRequest(entity: "Item", predicate: Field("number").isIn([1, .date(Date())]))
            ),
            (
                "a text match on an integer attribute",
                FetchRequest(entity: "Item", predicate: Field("number").contains("1"))
            ),
            ("a relationship the entity lacks", FetchRequest(entity: "Item", predicate: Field("nope").refers(to: nil))),
            (
                "a relationship to a record of the wrong entity",
                FetchRequest(entity: "Item", predicate: Field("owner").refers(to: label))
            ),
            ("a comparison on a relationship's name", FetchRequest(entity: "Item", predicate: Field("owner") == .null)),
            (
                "an invalid predicate nested in and/or/not",
                FetchRequest(entity: "Item", predicate: .and([.constant(true), .or([.not(Field("nope") == 1)])]))
            ),
            ("a sort by an unknown attribute", FetchRequest(entity: "Item", sortedBy: [.ascending("nope")])),
            ("a sort by a relationship", FetchRequest(entity: "Item", sortedBy: [.ascending("owner")])),
            ("a negative limit", FetchRequest(entity: "Item", limit: -1)),
            ("a negative offset", FetchRequest(entity: "Item", offset: -1)),
        ]
        for (what, request) in requests {
            try context.expectError([.invalidRequest], "a fetch with \(what)") { _ = try store.fetch(request) }
            if request.fetchLimit == nil && request.fetchOffset == 0 {
                try context.expectError([.invalidRequest], "a count with \(what)") { _ = try store.count(for: request) }
            }
        }
        // The store keeps working.
        try context.expectContents(store, relatedRecords(), "after the invalid requests")
        store.close()
    }
}
